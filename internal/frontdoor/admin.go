package frontdoor

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// AdminToken opens a server's admin pages (the proxy's status page and
// metrics) to a request from beyond the machine. It is not a client
// token, and a client token does not stand for it. Its zero value is no
// token: nothing it is asked about matches.
type AdminToken struct {
	sum [sha256.Size]byte // hashed, so that comparing takes the same time whatever the lengths
	set bool
}

// NewAdminToken returns the admin token s; a blank s is none.
func NewAdminToken(s string) AdminToken {
	if s = strings.TrimSpace(s); s == "" {
		return AdminToken{}
	}
	return AdminToken{sum: sha256.Sum256([]byte(s)), set: true}
}

// Set reports whether there is a token.
func (t AdminToken) Set() bool { return t.set }

// Match reports whether r carries the token in its Authorization
// header: as a bearer token (Prometheus, curl), or as the password of
// HTTP Basic authentication, whatever the user name (what a browser
// sends after it has prompted). It is compared in constant time.
func (t AdminToken) Match(r *http.Request) bool {
	if !t.set {
		return false
	}
	match := 0
	for _, v := range r.Header.Values("Authorization") {
		scheme, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
		var given string
		switch {
		case strings.EqualFold(scheme, "Bearer"):
			given = strings.TrimSpace(rest)
		case strings.EqualFold(scheme, "Basic"):
			pair, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
			if err != nil {
				continue
			}
			_, given, _ = strings.Cut(string(pair), ":")
		default:
			continue
		}
		h := sha256.Sum256([]byte(given))
		match |= subtle.ConstantTimeCompare(h[:], t.sum[:])
	}
	return match == 1
}

// Local reports whether r comes from this machine itself: it came in on
// a loopback address (the listener's, from http.LocalAddrContextKey),
// asks for a loopback host name (not a web page that rebound its own name
// to 127.0.0.1, which Enter lets through when there are client tokens,
// nor a name allowed for a server in front), and carries no header a
// server in front adds (Forwarded, X-Forwarded-For, X-Real-Ip): such a
// server, on the same machine, would make every request from anywhere
// look local. A request without a local address (served in memory) is
// not local.
func Local(r *http.Request) bool {
	addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || addr == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		return false
	}
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if _, ok := r.Header[h]; ok {
			return false
		}
	}
	host := r.Host
	if host == "" {
		host = r.URL.Host
	}
	return isLoopbackHost(host)
}
