package frontdoor

import (
	"net/http"
	"strings"
)

// allowOrigin adds to h the CORS headers of an answer to r, whose origin
// refusal has let through: none when r has no Origin.
func (d *Door) allowOrigin(h http.Header, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "*")
	h.Add("Vary", "Origin")
}

// preflightMethods are what a pre-flight may ask for.
const preflightMethods = "GET, POST, PUT, PATCH, DELETE"

// preflight answers an OPTIONS request, which never goes further: a
// pre-flight from an allowed origin (refusal let it through) with what
// it may send, anything else with the methods there are.
func (d *Door) preflight(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if method := r.Header.Get("Access-Control-Request-Method"); method != "" && r.Header.Get("Origin") != "" {
		h.Set("Access-Control-Allow-Origin", r.Header.Get("Origin"))
		h.Set("Access-Control-Allow-Methods", preflightMethods)
		if asked := r.Header.Values("Access-Control-Request-Headers"); len(asked) > 0 {
			// Whatever headers it asks for (an SDK's key and version
			// headers among them): the origin is trusted.
			h.Set("Access-Control-Allow-Headers", headerList(asked))
		}
		h.Set("Access-Control-Max-Age", "600")
		h.Add("Vary", "Origin, Access-Control-Request-Method, Access-Control-Request-Headers")
	}
	h.Set("Allow", "OPTIONS, "+preflightMethods)
	w.WriteHeader(http.StatusNoContent)
}

// headerList returns the header names of a pre-flight's
// Access-Control-Request-Headers, comma-separated, keeping only tokens.
func headerList(values []string) string {
	var names []string
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" && isToken(name) {
				names = append(names, name)
			}
		}
	}
	return strings.Join(names, ", ")
}

// isToken reports whether s is an HTTP token (RFC 9110), as a header name is.
func isToken(s string) bool {
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// StripCORS removes an upstream's CORS headers from its answer: they
// speak for the upstream's origin, not the door's, and an upstream's
// "Access-Control-Allow-Origin: *" would let any page read what the
// operator's key bought.
func StripCORS(h http.Header) {
	for k := range h {
		if len(k) > len("Access-Control-") && strings.EqualFold(k[:len("Access-Control-")], "Access-Control-") {
			delete(h, k)
		}
	}
}
