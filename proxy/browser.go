package proxy

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// browsers is what the proxy lets a web page in someone's browser do. A
// proxy that holds a key and asks no token is a local developer server
// with credentials, and does what they do: it answers only requests for
// a loopback host name (or one allowed), so that a page that rebinds its
// own name to 127.0.0.1 is refused; and a request from a page (its
// Origin, or Sec-Fetch-Site when it sends none) only from an origin
// allowed, to which alone it sends CORS headers. A pre-flight never goes
// to the upstream.
//
// With client tokens the Host is not checked (the token stands guard,
// and a proxy behind another server sees that server's names); the
// Origin is: no SDK sends one, a browser app the operator runs is
// listed, and a page that learnt a token still cannot use it from
// elsewhere.
type browsers struct {
	checkHost bool            // no client tokens
	hosts     map[string]bool // allowed besides loopback names, lower case
	origins   map[string]bool // allowed origins, as normalOrigin has them
	anyOrigin bool            // "*", with tokens only
}

// newBrowsers checks and keeps the allowed hosts and origins.
func newBrowsers(hosts, origins []string, withTokens bool) (browsers, error) {
	b := browsers{checkHost: !withTokens, hosts: map[string]bool{}, origins: map[string]bool{}}
	for _, h := range hosts {
		name, err := allowedHost(h)
		if err != nil {
			return b, err
		}
		b.hosts[name] = true
	}
	for _, o := range origins {
		if o == "*" {
			if !withTokens {
				return b, fmt.Errorf(`allowed origin "*" without client tokens: any web page could spend the upstream's key`)
			}
			b.anyOrigin = true
			continue
		}
		n, ok := normalOrigin(o)
		if !ok {
			return b, fmt.Errorf("allowed origin %q is not scheme://host[:port] (e.g. https://app.example.com)", o)
		}
		b.origins[n] = true
	}
	return b, nil
}

// allowedHost checks an allowed host name and returns it as Hosts are
// compared: lower case, without brackets.
func allowedHost(h string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	switch {
	case name == "":
		return "", fmt.Errorf("allowed host %q is empty", h)
	case strings.ContainsAny(name, "/@?#* "):
		return "", fmt.Errorf("allowed host %q is not a host name or address", h)
	case strings.Contains(name, ":"):
		if _, err := netip.ParseAddr(name); err != nil {
			return "", fmt.Errorf("allowed host %q: give the name without a port (any port is taken)", h)
		}
	}
	return name, nil
}

// normalOrigin returns an origin as browsers send it (scheme://host, and
// :port unless the scheme's default), lower case; ok is false for
// anything else.
func normalOrigin(s string) (string, bool) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname())
	port := u.Port()
	if scheme == "http" && port == "80" || scheme == "https" && port == "443" {
		port = ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port != "" {
		host += ":" + port
	}
	return scheme + "://" + host, true
}

// refusal says why r is refused, or "" if it is not.
func (b *browsers) refusal(r *http.Request) string {
	host := r.Host
	if host == "" {
		host = r.URL.Host // a request served in memory, as a client made it
	}
	if b.checkHost && !b.hostAllowed(host) {
		return "this proxy answers requests for a loopback host name only (localhost, 127.0.0.1, [::1]) and the hosts allowed"
	}
	origins := r.Header.Values("Origin")
	switch {
	case len(origins) > 1:
		return "more than one Origin header"
	case len(origins) == 1:
		if !b.originAllowed(origins[0]) {
			return "requests from web pages are answered only from the origins allowed"
		}
	default:
		// A browser sends no Origin on a cross-site navigation or a
		// plain GET; it says where it comes from all the same.
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
			return "requests from web pages are answered only from the origins allowed"
		}
	}
	return ""
}

// hostAllowed reports whether a request's Host is a loopback name or
// address, or an allowed host, with or without a port.
func (b *browsers) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if host == "localhost" || b.hosts[host] {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

func (b *browsers) originAllowed(origin string) bool {
	if b.anyOrigin {
		return true
	}
	n, ok := normalOrigin(origin)
	return ok && b.origins[n]
}

// allowOrigin adds to h the CORS headers of an answer to r, whose origin
// refusal has let through: none when r has no Origin.
func (b *browsers) allowOrigin(h http.Header, r *http.Request) {
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

// options answers an OPTIONS request, which never goes to the upstream:
// a pre-flight from an allowed origin (refusal let it through) with what
// it may send, anything else with the methods there are.
func (b *browsers) options(w http.ResponseWriter, r *http.Request) {
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

// stripCORS removes an upstream's CORS headers from its answer: they
// speak for the upstream's origin, not the proxy's, and OpenAI's
// "Access-Control-Allow-Origin: *" would let any page read what the
// operator's key bought.
func stripCORS(h http.Header) {
	for k := range h {
		if len(k) > len("Access-Control-") && strings.EqualFold(k[:len("Access-Control-")], "Access-Control-") {
			delete(h, k)
		}
	}
}
