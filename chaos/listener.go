package chaos

import (
	"bytes"
	"net"
)

// Reason phrases. net/http writes a response's status line itself, with
// the text of http.StatusText, and for a status it has no text for, 529
// among them, it writes "529 status code 529"; a ResponseWriter cannot
// choose the phrase. Hijacking the connection of every 529 would let the
// handler write its own status line, but net/http cannot take a hijacked
// connection back: every overloaded answer would close its connection,
// which no provider does, and clients would see connection churn rather
// than keep-alive. So the phrase is set one level down instead, in the
// bytes going out over the connection, where the server leaves everything
// else as it was.
//
// 529 is not a registered status, so it has no official phrase; the
// customary one, as the common lists of unofficial codes give it after
// Qualys SSL Labs' API, is "Site is overloaded", and it names the condition
// Anthropic answers 529 overloaded_error for. HTTP/2 sends no reason
// phrase at all, and clients are told to ignore it (RFC 9112), so it is
// for the people reading a trace.

// NewListener returns a listener that accepts the connections of inner
// and, in what net/http writes to them, replaces the status line of a 529
// with "HTTP/1.1 529 Site is overloaded" (or HTTP/1.0). Serve a Server on
// it so that its overloaded answers read as a provider's do:
//
//	ln, err := net.Listen("tcp", "127.0.0.1:0")
//	...
//	go http.Serve(chaos.NewListener(ln), srv)
//
// With httptest, set the Listener of an unstarted server to it. Everything
// else passes through unchanged, so it only matters for plain-text HTTP/1;
// a TLS listener wrapped around it sees ciphertext, which it leaves alone.
func NewListener(inner net.Listener) net.Listener { return listener{inner} }

type listener struct{ net.Listener }

func (l listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &conn{c}, nil
}

// conn rewrites the status line of a 529 as it is written.
type conn struct{ net.Conn }

var (
	// proto529 is the start of every HTTP/1 status line, "HTTP/1.", which
	// the minor version and the status follow.
	proto529  = []byte("HTTP/1.")
	status529 = []byte(" 529 status code 529\r\n")
	reason529 = []byte(" 529 Site is overloaded\r\n")
)

// Write writes p, its status line rewritten if it starts with net/http's
// line of a 529. A status line always starts a Write: net/http flushes
// its buffer at the end of every response, and the buffer (4 KiB) is far
// longer than the line. A body that came to a flush boundary with those
// exact bytes would be rewritten too; no body the Server sends does.
func (c *conn) Write(p []byte) (int, error) {
	at := len(proto529) + 1 // the status, after "HTTP/1.x"
	if len(p) < at+len(status529) || !bytes.HasPrefix(p, proto529) || !bytes.HasPrefix(p[at:], status529) {
		return c.Conn.Write(p)
	}
	b := make([]byte, 0, len(p)-len(status529)+len(reason529))
	b = append(b, p[:at]...)
	b = append(b, reason529...)
	b = append(b, p[at+len(status529):]...)
	n, err := c.Conn.Write(b)
	if n < at+len(reason529) {
		return min(n, at), err // a short write that cut the status line
	}
	return n - len(reason529) + len(status529), err
}

// CloseWrite half-closes the connection, as net/http does before it
// closes one it gives up on, if the connection can.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
