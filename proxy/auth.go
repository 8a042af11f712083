package proxy

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
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

const unauthorizedBody = `{"error":{"message":"missing or wrong proxy token (send it where your SDK sends its key: Authorization: Bearer, x-api-key, x-goog-api-key, api-key or ?key=)","type":"authentication_error","code":401}}`

// clientKeyHeaders are where clients send their keys (and tokens):
// OpenAI's, Anthropic's, Gemini's and Azure OpenAI's SDKs.
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

// admit reports whether r carries one of the tokens where a client sends
// its key (clientKeys); with no tokens, every request is admitted. Every
// token is compared, in constant time, whatever matched.
func (t tokens) admit(r *http.Request) bool {
	if len(t) == 0 {
		return true
	}
	match := 0
	for _, s := range clientKeys(r) {
		h := sha256.Sum256([]byte(s))
		for i := range t {
			match |= subtle.ConstantTimeCompare(h[:], t[i][:])
		}
	}
	return match == 1
}
