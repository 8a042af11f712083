package provider

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/rebound-go/rebound/internal/jsonscan"
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
	acts *jsonscan.Names
}{
	{"/responses", jsonscan.NewNames("conversation", "mcp")},
	{"/v1/messages", jsonscan.NewNames("mcp_servers")},
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

// bodyNames reports whether req's body, read through GetBody, names any
// of names: as a key or a string anywhere in it, its escapes resolved, in
// any spelling a parser may read as the name (jsonscan's rules). A body
// that is not JSON, or that it cannot read, is taken to: whether the
// provider reads a name in it is not known.
func bodyNames(req *http.Request, names *jsonscan.Names) bool {
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
	buf := bytes.NewBuffer(make([]byte, 0, max(req.ContentLength, 0)+1))
	if _, err := buf.ReadFrom(body); err != nil {
		return true
	}
	var s jsonscan.Scanner
	s.Reset(buf.Bytes())
	if names.Found(&s) {
		return true
	}
	return !s.End()
}
