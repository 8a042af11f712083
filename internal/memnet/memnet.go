// Package memnet is a network in memory for net/http: a real http.Server
// and http.Transport whose connections are net.Pipe pairs. Inside a
// testing/synctest bubble the whole of net/http's client and server then
// runs while the fake clock moves (loopback I/O is not durably blocking
// and would stall it), so that timeouts, deadlines and slow answers are
// tested to the instant whatever else the machine is doing.
package memnet

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// Serve serves h on a new in-memory network and returns a Transport that
// dials it, whatever host a request names, and a function that closes the
// Transport's idle connections and the server.
func Serve(h http.Handler) (tr *http.Transport, stop func()) {
	n := &network{conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: h}
	go srv.Serve(n)
	tr = &http.Transport{DialContext: n.dial, MaxIdleConnsPerHost: 64}
	return tr, func() {
		tr.CloseIdleConnections()
		srv.Close()
	}
}

// network is a net.Listener whose connections come from its dial.
type network struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (n *network) Accept() (net.Conn, error) {
	select {
	case c := <-n.conns:
		return c, nil
	case <-n.done:
		return nil, net.ErrClosed
	}
}

func (n *network) Close() error   { n.once.Do(func() { close(n.done) }); return nil }
func (n *network) Addr() net.Addr { return addr{} }

// dial hands the server one end of a new pipe.
func (n *network) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case n.conns <- server:
		return client, nil
	case <-n.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type addr struct{}

func (addr) Network() string { return "memnet" }
func (addr) String() string  { return "memnet" }
