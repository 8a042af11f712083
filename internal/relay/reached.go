package relay

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
)

// Refusal reports whether status is one by which a server says it did not
// take a request on: too many requests (429), unavailable (503), and the
// providers' own overloaded (Anthropic's 529) and at capacity (Groq's
// 498). A gateway that answers one of them for a request its backend had
// already acted on breaks their meaning; 500, 502, 504 and 408 (which some
// gateways send when a backend took too long) say no such thing.
func Refusal(status int) bool {
	switch status {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, 529, 498:
		return true
	}
	return false
}

// Sent notes, through net/http's client trace, whether an attempt asked
// for a connection and whether it got one: net/http writes a request only
// on a connection it got.
type Sent struct{ asked, got atomic.Bool }

// Trace returns req with a trace that notes what happened to its
// connection, as well as any trace it had.
func Trace(req *http.Request) (*http.Request, *Sent) {
	s := &Sent{}
	trace := &httptrace.ClientTrace{
		GetConn: func(string) { s.asked.Store(true) },
		GotConn: func(httptrace.GotConnInfo) { s.got.Store(true) },
	}
	return req.WithContext(httptrace.WithClientTrace(req.Context(), trace)), s
}

// Unreached reports whether an attempt that failed with err provably
// never reached the server: it got no connection (not one net/http wrote
// it on before sending it again itself, on a connection it then failed to
// make), and either net/http asked for one (a dial, a TLS handshake or a
// proxy's tunnel failed, or the attempt's time ran out first) or err is a
// failure to connect (Unconnected), from a Base that does not trace.
func (s *Sent) Unreached(err error) bool {
	if s.got.Load() {
		return false
	}
	return s.asked.Load() || Unconnected(err)
}

// Unconnected reports whether err is a failure to connect: the host's
// name did not resolve, or no connection to it (or to the proxy on the
// way) could be made. A request that failed so never left; a later try
// may get through, once the network or its name service is back.
func Unconnected(err error) bool {
	var (
		op  *net.OpError
		dns *net.DNSError
	)
	return errors.As(err, &dns) || errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect")
}
