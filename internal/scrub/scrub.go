// Package scrub keeps credentials out of every text rebound produces or
// keeps: error bodies, in-stream error events, transport errors, headers
// a server echoes, and the messages built from them.
//
// Two nets catch a credential. A request's own credentials (the values of
// its credential headers and its "key" query parameter) are known
// exactly, and are replaced wherever they appear, also in the encoded
// forms a server might echo them in (URL query and path escaping, with
// escapes in either case; the query exactly as it was sent; a JSON
// encoder's escaped solidus). And text that has the shape of a
// provider's API key (OpenAI's and Anthropic's "sk-…", Google's "AIza…",
// Groq's "gsk_…", an AWS access key ID, a bearer token) is replaced even
// when no request is known: that covers an error a caller built by hand.
//
// Text is scrubbed before it is cut to a length, and a cut that leaves the
// start of a credential at the end drops it, so that no prefix of a key
// survives a truncation.
package scrub

import (
	"bytes"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/rebound-go/rebound/internal/runes"
)

// Redacted replaces a credential.
const Redacted = "[redacted]"

// minSecret is the shortest value treated as a credential: shorter ones
// would scrub ordinary words. minPartial is the shortest start of a
// credential dropped from the end of a cut text: three characters of a key
// ("sk-") say nothing.
const (
	minSecret  = 8
	minPartial = 4
)

// Headers are the request headers that carry credentials: their values
// are the secrets of a request, and a server that echoes one in its
// response headers has it redacted there.
var Headers = []string{"Authorization", "Proxy-Authorization", "X-Api-Key", "Api-Key", "X-Goog-Api-Key", "Cookie", "Set-Cookie"}

// Secrets are the credentials of one request, in every form a server
// might echo them in, longest first. The zero value knows no request and
// scrubs key shapes only.
type Secrets struct {
	values []string
}

// Of returns the credentials req carries: the values of its credential
// headers (and the token of "Bearer …"), and its "key" query parameter.
func Of(req *http.Request) Secrets {
	if req == nil {
		return Secrets{}
	}
	var s Secrets
	add := func(v string) {
		v = strings.TrimSpace(v)
		if len(v) < minSecret {
			return
		}
		for _, escaped := range []string{v, url.QueryEscape(v), url.PathEscape(v)} {
			// Percent-escapes in either case, and a JSON encoder's
			// escaped solidus (PHP's json_encode writes "/" as "\/").
			for _, form := range []string{escaped, lowerEscapes(escaped), strings.ReplaceAll(escaped, "/", `\/`)} {
				if s.values == nil {
					// Room for the forms of a header's value and its
					// token, most of which are the same string: one
					// allocation for the commonest request.
					s.values = make([]string, 0, 8)
				}
				if !slices.Contains(s.values, form) {
					s.values = append(s.values, form)
				}
			}
		}
	}
	for _, h := range Headers {
		for _, v := range req.Header.Values(h) {
			add(v)
			if _, token, ok := strings.Cut(v, " "); ok {
				add(token)
			}
		}
	}
	if req.URL != nil && req.URL.RawQuery != "" {
		for _, v := range req.URL.Query()["key"] {
			add(v)
		}
		// The value as it was sent, whatever its escaping ("%2f" or
		// "%2F", "+" or "%20").
		for _, pair := range strings.Split(req.URL.RawQuery, "&") {
			if v, ok := strings.CutPrefix(pair, "key="); ok {
				add(v)
			}
		}
	}
	slices.SortFunc(s.values, func(a, b string) int { return len(b) - len(a) })
	return s
}

// lowerEscapes returns s with its percent-escapes in lower case ("%2f"
// for "%2F"), as some servers write them.
func lowerEscapes(s string) string {
	if !hasUpperEscape(s) {
		return s
	}
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1], b[i+2] = lowerHex(b[i+1]), lowerHex(b[i+2])
			i += 2
		}
	}
	return string(b)
}

// hasUpperEscape reports whether s has a percent-escape with a hex digit
// in upper case, which lowerEscapes changes.
func hasUpperEscape(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' {
			if lowerHex(s[i+1]) != s[i+1] || lowerHex(s[i+2]) != s[i+2] {
				return true
			}
			i += 2
		}
	}
	return false
}

func lowerHex(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// String returns t with every known credential and every key-shaped word
// replaced by Redacted.
func (s Secrets) String(t string) string {
	spans := s.find([]byte(t))
	if len(spans) == 0 {
		return t
	}
	return string(replace([]byte(t), spans))
}

// Bytes is String for a byte slice; it returns b itself when nothing was
// replaced, else a new slice, made in one pass.
func (s Secrets) Bytes(b []byte) []byte {
	spans := s.find(b)
	if len(spans) == 0 {
		return b
	}
	return replace(b, spans)
}

// Empty reports whether s knows no credential (it scrubs key shapes
// only).
func (s Secrets) Empty() bool { return len(s.values) == 0 }

// Known returns t with every known credential replaced by Redacted, and
// key-shaped words left: for text that is not an error's, such as a
// response's headers, where such a word may be anything.
func (s Secrets) Known(t string) string {
	spans := s.findKnown([]byte(t), nil)
	if len(spans) == 0 {
		return t
	}
	return string(replace([]byte(t), spans))
}

// span is a stretch of text to replace: b[start:end].
type span struct{ start, end int }

// find returns where b holds a known credential or a key-shaped word, in
// order and without overlaps; a longer credential wins over one it holds.
func (s Secrets) find(b []byte) []span {
	return s.findKnown(b, func(b []byte, from int) (int, int) { return nextShape(b, from) })
}

// findKnown is find with the key shapes nextShape finds (nil: none).
func (s Secrets) findKnown(b []byte, nextShape func(b []byte, from int) (start, end int)) []span {
	var spans []span
	overlaps := func(start, end int) bool {
		for _, sp := range spans {
			if start < sp.end && sp.start < end {
				return true
			}
		}
		return false
	}
	for _, v := range s.values { // longest first
		for from := 0; ; {
			i := bytes.Index(b[from:], []byte(v))
			if i < 0 {
				break
			}
			start := from + i
			if !overlaps(start, start+len(v)) {
				spans = append(spans, span{start, start + len(v)})
			}
			from = start + len(v)
		}
	}
	if nextShape != nil {
		for start, end := nextShape(b, 0); start >= 0; start, end = nextShape(b, end) {
			if !overlaps(start, end) {
				spans = append(spans, span{start, end})
			}
		}
	}
	slices.SortFunc(spans, func(a, b span) int { return a.start - b.start })
	return spans
}

// replace returns b with each of spans replaced by Redacted.
func replace(b []byte, spans []span) []byte {
	out := make([]byte, 0, len(b))
	last := 0
	for _, sp := range spans {
		out = append(out, b[last:sp.start]...)
		out = append(out, Redacted...)
		last = sp.end
	}
	return append(out, b[last:]...)
}

// Cut returns t scrubbed and cut to at most n bytes on a rune boundary, with the start of a
// credential left at the end of the cut dropped. ok is false when t had
// to be cut.
func (s Secrets) Cut(t string, n int) (cut string, ok bool) {
	t = s.String(t)
	if len(t) <= n {
		return t, true
	}
	return s.dropPartial(runes.Cut(t, n)), false
}

// CutBytes is Cut for bytes, keeping at most n; it drops the start of a
// credential from the end of b even when b is no longer than n, since b
// may be the first n bytes of something longer.
func (s Secrets) CutBytes(b []byte, n int) []byte {
	b = s.Bytes(b)
	if len(b) > n {
		b = b[:n]
	}
	// Only the end can hold a partial credential: look at no more of b
	// than the longest credential, or a key word, could take.
	tail := b[max(0, len(b)-s.longest()-maxWord):]
	if t := s.dropPartial(string(tail)); len(t) != len(tail) {
		return b[:len(b)-len(tail)+len(t)]
	}
	return b
}

// maxWord bounds the length of a key-shaped word dropPartial looks at.
const maxWord = 256

// longest is the length of the longest known credential.
func (s Secrets) longest() int {
	if len(s.values) == 0 {
		return 0
	}
	return len(s.values[0]) // sorted longest first
}

// dropPartial drops from the end of t the start of a known credential, or
// a last word that begins like a key or follows "Bearer ". It never makes t
// longer.
func (s Secrets) dropPartial(t string) string {
	for _, v := range s.values {
		for k := min(len(v)-1, len(t)); k >= minPartial; k-- {
			if strings.HasSuffix(t, v[:k]) {
				return t[:len(t)-k]
			}
		}
	}
	start := len(t)
	for start > 0 && keyByte(t[start-1]) {
		start--
	}
	if start == len(t) {
		return t
	}
	before := t[:start]
	if keyPrefix(t[start:]) != "" && (start == 0 || !wordByte(t[start-1])) ||
		strings.HasSuffix(before, "Bearer ") || strings.HasSuffix(before, "bearer ") {
		return before
	}
	return t
}

// Header returns h with the values of credential headers redacted and
// known credentials scrubbed from the others; h itself when nothing
// changed, else a copy (h may be a response's own header).
func (s Secrets) Header(h http.Header) http.Header {
	var out http.Header
	set := func(k string, vs []string) {
		if out == nil {
			out = h.Clone()
		}
		out[k] = vs
	}
	for k, vs := range h {
		if slices.ContainsFunc(Headers, func(c string) bool { return http.CanonicalHeaderKey(c) == http.CanonicalHeaderKey(k) }) {
			red := make([]string, len(vs))
			for i := range red {
				red[i] = Redacted
			}
			set(k, red)
			continue
		}
		for i, v := range vs {
			if w := s.String(v); w != v {
				c := slices.Clone(vs)
				c[i] = w
				for j := i + 1; j < len(c); j++ {
					c[j] = s.String(c[j])
				}
				set(k, c)
				break
			}
		}
	}
	if out == nil {
		return h
	}
	return out
}

// Text scrubs key-shaped words from t: for text whose request is not
// known.
func Text(t string) string { return Secrets{}.String(t) }

// keyPrefixes start the API keys of the providers whose keys have a
// recognisable shape; minKeyTail is how many key characters must follow,
// so that "sk-learn" is a word and not a key.
var keyPrefixes = []string{"sk-", "sk_", "gsk_", "xai-", "AIza", "AKIA", "ASIA", "hf_", "pk-", "r8_"}

const minKeyTail = 16

// startsShape holds the bytes a key prefix or "Bearer " begins with: the
// scan looks no further at any other.
var startsShape = func() (first [256]bool) {
	for _, p := range append(keyPrefixes, "Bearer", "bearer") {
		first[p[0]] = true
	}
	return first
}()

// keyPrefix returns the key prefix w starts with, if any.
func keyPrefix(w string) string {
	for _, p := range keyPrefixes {
		if strings.HasPrefix(w, p) {
			return p
		}
	}
	return ""
}

// keyByte reports whether c may appear in an API key or token.
func keyByte(c byte) bool {
	return wordByte(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '+' || c == '/' || c == '='
}

// wordByte reports whether c continues a word, so that a prefix after it
// ("task-…") is not the start of a key.
func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// nextShape finds the first key-shaped word or bearer token in t at or
// after from: the bytes t[start:end] to replace, or start -1.
func nextShape[T string | []byte](t T, from int) (start, end int) {
	for i := from; i < len(t); i++ {
		if !startsShape[t[i]] || i > 0 && wordByte(t[i-1]) {
			continue
		}
		for _, p := range keyPrefixes {
			if hasPrefixAt(t, i, p) {
				if end := keyEnd(t, i+len(p)); end-i-len(p) >= minKeyTail {
					return i, end
				}
			}
		}
		if hasPrefixAt(t, i, "Bearer ") || hasPrefixAt(t, i, "bearer ") {
			start := i + len("Bearer ")
			if end := keyEnd(t, start); end-start >= minSecret {
				return start, end
			}
		}
	}
	return -1, -1
}

func hasPrefixAt[T string | []byte](t T, i int, p string) bool {
	if len(t)-i < len(p) {
		return false
	}
	for j := range len(p) {
		if t[i+j] != p[j] {
			return false
		}
	}
	return true
}

// keyEnd returns where the run of key characters from i ends.
func keyEnd[T string | []byte](t T, i int) int {
	for i < len(t) && keyByte(t[i]) {
		i++
	}
	return i
}
