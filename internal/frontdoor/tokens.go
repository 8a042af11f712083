package frontdoor

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
)

// tokens are the client tokens, hashed so that comparing them takes the
// same time whatever their lengths; a blank one is kept as a hash no
// request matches, so that indices stay those of Options.Tokens.
type tokens []token

type token struct {
	sum   [sha256.Size]byte
	blank bool
}

func newTokens(list []string) tokens {
	var t tokens
	for _, s := range list {
		s = strings.TrimSpace(s)
		t = append(t, token{sum: sha256.Sum256([]byte(s)), blank: s == ""})
	}
	return t
}

// count returns how many tokens are not blank.
func (t tokens) count() int {
	n := 0
	for _, k := range t {
		if !k.blank {
			n++
		}
	}
	return n
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

// ClientKey returns what r presents where a client sends its key, one a
// line: the client's own credential, to keep apart what is kept for each
// holder of one. It is all that DropKeys would strip, each header's value
// whole: an Authorization of any scheme reaches an upstream with the
// client's key, not only a bearer token.
func ClientKey(r *http.Request) string {
	var b strings.Builder
	for _, h := range clientKeyHeaders {
		for _, v := range r.Header.Values(h) {
			b.WriteString(h)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteByte('\n')
		}
	}
	for _, v := range r.URL.Query()["key"] {
		b.WriteString("key=")
		b.WriteString(url.QueryEscape(v))
		b.WriteByte('\n')
	}
	return b.String()
}

// Admit reports whether r carries one of the tokens where a client sends
// its key: Authorization: Bearer (the scheme in any case), x-api-key,
// x-goog-api-key, api-key or the "key" query parameter. With no tokens,
// every request is admitted. Every token is compared, in constant time,
// whatever matched.
func (d *Door) Admit(r *http.Request) bool {
	if !d.HasTokens() {
		return true
	}
	_, ok := d.Match(r)
	return ok
}

// Match returns the index in Options.Tokens of the token r carries (as
// Admit finds it), and false when it carries none of them. When r carries
// several, the last of Options.Tokens wins; a caller that tells holders
// apart keeps a token to one holder. Every token is compared, in constant
// time, whatever matched.
func (d *Door) Match(r *http.Request) (index int, ok bool) {
	match, at := 0, 0
	for _, s := range clientKeys(r) {
		h := sha256.Sum256([]byte(s))
		for i := range d.tokens {
			eq := subtle.ConstantTimeCompare(h[:], d.tokens[i].sum[:])
			if d.tokens[i].blank {
				eq = 0
			}
			at = subtle.ConstantTimeSelect(eq, i, at)
			match |= eq
		}
	}
	return at, match == 1
}

// Holder names the holder of the token at index i (as Match returns it)
// by a hash of the token, never the token: the same name from every Door
// that has the token, whatever its index there, so that what is bound to
// a holder outlives a reload that reorders the tokens.
func (d *Door) Holder(i int) string {
	if i < 0 || i >= len(d.tokens) {
		return ""
	}
	return hex.EncodeToString(d.tokens[i].sum[:16])
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
