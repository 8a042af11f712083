// Package serve runs the command's HTTP servers, "rebound proxy",
// "rebound chaos" and "rebound mcp --addr", the same way: the first line
// on stdout says where they listen, and once the command is told to stop
// they let the requests in flight finish for a while, then close what is
// still open.
package serve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// CheckAddr returns the host of addr, or why addr is not host:port with
// a port from 0 to 65535, in one line.
func CheckAddr(addr string) (host string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("--addr %q: %v (want host:port, e.g. 127.0.0.1:0)", addr, err)
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n > 65535 {
		return "", fmt.Errorf("--addr %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return host, nil
}

// Config is how Run serves.
type Config struct {
	// Addr is where to listen, host:port (see CheckAddr).
	Addr string
	// Server serves; Run sets nothing of it but what it serves on.
	Server *http.Server
	// Listener, if set, wraps the listener the server accepts on.
	Listener func(net.Listener) net.Listener
	// Drain is how long the requests in flight may finish once the
	// command is told to stop.
	Drain time.Duration
	// Stdout is where the first line, "listening on http://HOST:PORT",
	// goes; Path, if set, ends it ("/mcp").
	Stdout io.Writer
	Path   string
	// Stopping, if set, is called once the command is told to stop,
	// before the drain. Unfinished, if set, is told of requests still in
	// flight when the drain ran out, before their connections are closed.
	Stopping   func()
	Unfinished func(err error)
}

// Run listens on c.Addr, says where on c.Stdout, and serves until ctx is
// done; then it lets the requests in flight finish for up to c.Drain,
// closes the connections still open, and returns nil. It returns why it
// could not listen, or why serving stopped before ctx was done.
func Run(ctx context.Context, c Config) error {
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.Stdout, "listening on http://%s%s\n", ln.Addr(), c.Path)
	if c.Listener != nil {
		ln = c.Listener(ln)
	}
	served := make(chan error, 1)
	go func() { served <- c.Server.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	if c.Stopping != nil {
		c.Stopping()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), c.Drain)
	defer cancel()
	if err := c.Server.Shutdown(shutdownCtx); err != nil {
		if c.Unfinished != nil {
			c.Unfinished(err)
		}
		c.Server.Close()
	}
	<-served // http.ErrServerClosed
	return nil
}

// IsLoopback reports whether host names a loopback address only: a
// server there needs no tokens of its clients.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
