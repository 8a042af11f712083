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

const unauthorizedBody = `{"error":{"message":"missing or wrong proxy token (send it as Authorization: Bearer or x-api-key)","type":"authentication_error","code":401}}`

// admit reports whether r carries one of the tokens, as a bearer token or
// an x-api-key; with no tokens, every request is admitted. Every token is
// compared, in constant time, whatever matched.
func (t tokens) admit(r *http.Request) bool {
	if len(t) == 0 {
		return true
	}
	var presented []string
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		presented = append(presented, strings.TrimSpace(v))
	}
	if v := r.Header.Get("X-Api-Key"); v != "" {
		presented = append(presented, strings.TrimSpace(v))
	}
	match := 0
	for _, s := range presented {
		h := sha256.Sum256([]byte(s))
		for i := range t {
			match |= subtle.ConstantTimeCompare(h[:], t[i][:])
		}
	}
	return match == 1
}
