package frontdoor

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// Options say who may call. The zero value admits requests for loopback
// host names from no web page, without tokens.
type Options struct {
	// Tokens are the client tokens; a request must carry one of them
	// where a client sends its key (see Admit). Blank ones are ignored;
	// none means no check, and then the Host is checked.
	Tokens []string
	// AllowHosts are the host names (or addresses), besides the loopback
	// ones, that a Door without Tokens answers, with any port. With
	// Tokens the Host is not checked.
	AllowHosts []string
	// AllowOrigins are the web origins ("https://app.example.com") whose
	// pages may call, and get CORS headers; "*" allows every origin, and
	// only with Tokens. None means no page may.
	AllowOrigins []string
}

// Door is the rule of Options, checked and ready. Its methods are safe
// for concurrent use.
type Door struct {
	tokens    tokens
	checkHost bool            // no client tokens
	hosts     map[string]bool // allowed besides loopback names, lower case
	origins   map[string]bool // allowed origins, as normalOrigin has them
	anyOrigin bool            // "*", with tokens only
}

// New returns the Door of o, or a one-line error naming the bad allowed
// host or origin.
func New(o Options) (*Door, error) {
	d := &Door{tokens: newTokens(o.Tokens), hosts: map[string]bool{}, origins: map[string]bool{}}
	d.checkHost = d.tokens.count() == 0
	for _, h := range o.AllowHosts {
		name, err := allowedHost(h)
		if err != nil {
			return nil, err
		}
		d.hosts[name] = true
	}
	for _, origin := range o.AllowOrigins {
		if origin == "*" {
			if d.checkHost {
				return nil, fmt.Errorf(`allowed origin "*" without client tokens: any web page could call`)
			}
			d.anyOrigin = true
			continue
		}
		n, ok := normalOrigin(origin)
		if !ok {
			return nil, fmt.Errorf("allowed origin %q is not scheme://host[:port] (e.g. https://app.example.com)", origin)
		}
		d.origins[n] = true
	}
	return d, nil
}

// HasTokens reports whether the door asks for client tokens.
func (d *Door) HasTokens() bool { return !d.checkHost }

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

// Enter judges r before anything is served, in the order every server of
// rebound's keeps. If r is refused whatever token it carries (a Host that
// is neither loopback nor allowed, without tokens; an Origin not
// allowed), refused says why, the text of the caller's 403, and nothing
// is written. An OPTIONS request is answered here (a pre-flight from an
// allowed origin with what it may send): answered is true and the caller
// is done. Otherwise w has the CORS headers r's origin gets, and the
// caller goes on, to Admit where a token is needed.
func (d *Door) Enter(w http.ResponseWriter, r *http.Request) (refused string, answered bool) {
	if why := d.refusal(r); why != "" {
		return why, false
	}
	if r.Method == http.MethodOptions {
		d.preflight(w, r)
		return "", true
	}
	d.allowOrigin(w.Header(), r)
	return "", false
}

// refusal says why r is refused whatever token it carries, or "".
func (d *Door) refusal(r *http.Request) string {
	host := r.Host
	if host == "" {
		host = r.URL.Host // a request served in memory, as a client made it
	}
	if d.checkHost && !d.hostAllowed(host) {
		return "requests are answered only for a loopback host name (localhost, 127.0.0.1, [::1]) and the hosts allowed"
	}
	origins := r.Header.Values("Origin")
	switch {
	case len(origins) > 1:
		return "more than one Origin header"
	case len(origins) == 1:
		if !d.originAllowed(origins[0]) {
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
func (d *Door) hostAllowed(hostport string) bool {
	return isLoopbackHost(hostport) || d.hosts[bareHost(hostport)]
}

// isLoopbackHost reports whether a request's Host is a loopback name or
// address, with or without a port.
func isLoopbackHost(hostport string) bool {
	host := bareHost(hostport)
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// bareHost returns a Host without its port and brackets, in lower case.
func bareHost(hostport string) string {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
}

func (d *Door) originAllowed(origin string) bool {
	if d.anyOrigin {
		return true
	}
	n, ok := normalOrigin(origin)
	return ok && d.origins[n]
}
