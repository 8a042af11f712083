package frontdoor

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"net/url"
	"strings"
)

// tokens are the client tokens, hashed so that comparing them takes the
// same time whatever their lengths.
type tokens [][sha256.Size]byte

func newTokens(list []string) tokens {
	var t tokens
	for _, s := range list {
		if s = strings.TrimSpace(s); s != "" {
			t = append(t, sha256.Sum256([]byte(s)))
		}
	}
	return t
}

// clientKeyHeaders are where clients send their keys (and tokens):
// OpenAI's, Anthropic's, Gemini's and Azure OpenAI's SDKs; MCP clients
// send Authorization: Bearer.
var clientKeyHeaders = []string{"Authorization", "X-Api-Key", "X-Goog-Api-Key", "Api-Key"}

// clientKeys returns the keys r presents: each client-key header's value
// (a bearer token's, for Authorization, whatever the scheme's case) and
// its "key" query parameter (Gemini's).
func clientKeys(r *http.Request) []string {
	var keys []string
	add := func(v string) {
		if v = strings.TrimSpace(v); v != "" {
			keys = append(keys, v)
		}
	}
	for _, h := range clientKeyHeaders {
		for _, v := range r.Header.Values(h) {
			if h == "Authorization" {
				scheme, token, ok := strings.Cut(strings.TrimSpace(v), " ")
				if !ok || !strings.EqualFold(scheme, "Bearer") {
					continue
				}
				v = token
			}
			add(v)
		}
	}
	for _, v := range r.URL.Query()["key"] {
		add(v)
	}
	return keys
}

// Admit reports whether r carries one of the tokens where a client sends
// its key: Authorization: Bearer (the scheme in any case), x-api-key,
// x-goog-api-key, api-key or the "key" query parameter. With no tokens,
// every request is admitted. Every token is compared, in constant time,
// whatever matched.
func (d *Door) Admit(r *http.Request) bool {
	if len(d.tokens) == 0 {
		return true
	}
	match := 0
	for _, s := range clientKeys(r) {
		h := sha256.Sum256([]byte(s))
		for i := range d.tokens {
			match |= subtle.ConstantTimeCompare(h[:], d.tokens[i][:])
		}
	}
	return match == 1
}

// DropKeys removes from a request going further (its header h and URL
// u) every place Admit looks for a token, so that neither a token nor a
// client's own key travels on where it was not meant to.
func DropKeys(h http.Header, u *url.URL) {
	for _, name := range clientKeyHeaders {
		h.Del(name)
	}
	if q := u.Query(); q.Has("key") {
		q.Del("key")
		u.RawQuery = q.Encode()
	}
}
