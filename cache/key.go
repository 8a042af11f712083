package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/rebound-go/rebound/internal/jsonscan"
)

// Scope is what, beyond the request itself, an answer belongs to: no
// answer stored under one Scope is served under another.
type Scope struct {
	// Tenant names whose answer it is; "" for none.
	Tenant string
	// Route names the upstreams it came from, as the proxy's routes do;
	// "" for none.
	Route string
	// ClientKey is the client's own credential, where it reaches the
	// provider: an answer is kept apart per key, under a hash of it.
	ClientKey string
}

// answerHeaders are the request headers that change an answer.
var answerHeaders = []string{"Anthropic-Version", "Anthropic-Beta", "Openai-Beta"}

// Key returns the key of req, sent with body, under scope, and whether it
// can be cached at all: a body that is not JSON (empty is fine), or whose
// objects repeat a key, cannot. The key is a hex SHA-256 of the scope and
// of a canonical form of the request, so two requests that differ only in
// the order of their JSON keys, their white space or the order of their
// query share it, and it says nothing of what they hold.
func Key(scope Scope, req *http.Request, body []byte) (string, bool) {
	h := sha256.New()
	var b []byte
	b = append(b, "rebound-cache/1\n"...)
	b = appendField(b, scope.Tenant)
	b = appendField(b, scope.Route)
	if scope.ClientKey != "" {
		sum := sha256.Sum256([]byte(scope.ClientKey))
		b = hex.AppendEncode(b, sum[:])
	}
	b = append(b, '\n')
	b = appendField(b, req.Method)
	b = appendField(b, req.URL.EscapedPath())
	b = appendField(b, canonicalQuery(req.URL.RawQuery))
	for _, name := range answerHeaders {
		for _, v := range req.Header[name] {
			b = append(b, name...)
			b = append(b, ':')
			b = appendField(b, v)
		}
	}
	if Streamed(req, body) {
		b = append(b, "stream\n"...)
	}
	h.Write(b)
	if len(bytes.TrimSpace(body)) > 0 {
		var c canonical
		c.s.Reset(body)
		c.s.Strict = true
		out := c.value(make([]byte, 0, len(body)))
		if !c.s.End() || c.dup {
			return "", false
		}
		h.Write(out)
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// appendField appends s and a line's end, the end escaped in s so that no
// field runs into the next.
func appendField(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\n':
			b = append(b, `\n`...)
		case '\\':
			b = append(b, `\\`...)
		default:
			b = append(b, s[i])
		}
	}
	return append(b, '\n')
}

// canonicalQuery is raw with its parameters sorted (each kept as it is
// spelled, so that nothing a server reads differently is merged).
func canonicalQuery(raw string) string {
	if raw == "" || !strings.Contains(raw, "&") {
		return raw
	}
	params := strings.Split(raw, "&")
	slices.Sort(params)
	return strings.Join(params, "&")
}

// Streamed reports whether req, sent with body, asks for a streamed
// answer: "stream": true in its JSON body, Gemini's
// streamGenerateContent, or alt=sse in its query.
func Streamed(req *http.Request, body []byte) bool {
	if strings.HasSuffix(req.URL.Path, ":streamGenerateContent") {
		return true
	}
	if q, err := url.ParseQuery(req.URL.RawQuery); err == nil && q.Get("alt") == "sse" {
		return true
	}
	var s jsonscan.Scanner
	s.Reset(body)
	if s.Next() != jsonscan.Object {
		return false
	}
	m := s.Object(streamName)
	for m.Next() {
		if m.Name() == 0 {
			return s.Next() == jsonscan.True
		}
		s.Skip()
	}
	return false
}

var streamName = jsonscan.NewNames("stream")

// canonical writes a JSON document with its objects' keys sorted by their
// text and no white space; dup says an object repeated a key.
type canonical struct {
	s   jsonscan.Scanner
	dup bool
	key []byte
}

type member struct {
	key   string
	value []byte
}

func (c *canonical) value(dst []byte) []byte {
	s := &c.s
	switch s.Next() {
	case jsonscan.Object:
		var members []member
		m := s.Object(nil)
		for m.Next() {
			key := string(s.Text(c.key[:0], m.Key()))
			members = append(members, member{key: key, value: c.value(nil)})
		}
		slices.SortFunc(members, func(a, b member) int { return strings.Compare(a.key, b.key) })
		dst = append(dst, '{')
		for i, mb := range members {
			if i > 0 {
				dst = append(dst, ',')
				if members[i-1].key == mb.key {
					c.dup = true
				}
			}
			k, _ := json.Marshal(mb.key)
			dst = append(dst, k...)
			dst = append(dst, ':')
			dst = append(dst, mb.value...)
		}
		return append(dst, '}')
	case jsonscan.Array:
		dst = append(dst, '[')
		e := s.Array()
		for i := 0; e.Next(); i++ {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = c.value(dst)
		}
		return append(dst, ']')
	default:
		return append(dst, s.Bytes(s.Skip())...)
	}
}
