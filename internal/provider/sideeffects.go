package provider

import (
	"bytes"
	"io"
	"net/http"
	"strings"
)

// SideEffects reports whether req may have side effects, by what rebound
// knows of the providers' HTTP APIs: rebound.ProviderSideEffects, which
// documents the rule.
func SideEffects(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	case http.MethodPost:
	default:
		return true
	}
	if req.URL == nil {
		return true
	}
	path := req.URL.Path
	if _, method, ok := strings.Cut(path[strings.LastIndexByte(path, '/')+1:], ":"); ok {
		switch method {
		case "generateContent", "streamGenerateContent", "countTokens", "embedContent", "batchEmbedContents":
			return false
		}
		return true
	}
	for _, p := range pureCalls {
		if strings.HasSuffix(path, p.tail) {
			return p.acts != nil && bodyNames(req, p.acts)
		}
	}
	return true
}

// pureCalls are the model calls of SideEffects, by the end of
// their path, with the JSON names by which such a call asks the provider
// to act beyond answering.
var pureCalls = []struct {
	tail string
	acts []string
}{
	{"/responses", []string{`"conversation"`, `"mcp"`}},
	{"/v1/messages", []string{`"mcp_servers"`}},
	{"/completions", nil}, // chat completions too
	{"/responses/input_tokens", nil},
	{"/embeddings", nil},
	{"/moderations", nil},
	{"/audio/speech", nil},
	{"/audio/transcriptions", nil},
	{"/audio/translations", nil},
	{"/images/generations", nil},
	{"/images/edits", nil},
	{"/images/variations", nil},
	{"/v1/messages/count_tokens", nil},
	{"/v1/complete", nil},
	{"/api/chat", nil},
	{"/api/generate", nil},
	{"/api/embed", nil},
	{"/rerank", nil},
}

// bodyNames reports whether req's body, read through GetBody, holds any
// of names (each quoted, as JSON writes it); a body it cannot read is
// taken to. In JSON a string's own quotes are escaped, so a quoted name
// is found only where a whole string is that name.
func bodyNames(req *http.Request, names []string) bool {
	if req.Body == nil || req.Body == http.NoBody {
		return false
	}
	if req.GetBody == nil {
		return true
	}
	body, err := req.GetBody()
	if err != nil {
		return true
	}
	defer body.Close()
	longest := 0
	for _, n := range names {
		longest = max(longest, len(n))
	}
	// A name cut between two reads is found whole in the next: each read
	// goes on after the last longest-1 bytes of the one before.
	buf := make([]byte, 8<<10)
	kept := 0
	for {
		n, err := io.ReadAtLeast(body, buf[kept:], 1)
		seen := buf[:kept+n]
		for _, name := range names {
			if bytes.Contains(seen, []byte(name)) {
				return true
			}
		}
		switch {
		case err == io.EOF:
			return false
		case err != nil:
			return true
		}
		kept = copy(buf, seen[max(len(seen)-(longest-1), 0):])
	}
}
