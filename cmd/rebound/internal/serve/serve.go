// Package serve checks where the command's HTTP servers listen, and runs
// those with no front of their own ("rebound chaos") as internal/front
// runs "rebound proxy" and "rebound mcp --addr": the first line on stdout
// says where they listen, and once the command is told to stop they let
// the requests in flight finish for a while, then close what is still
// open.
package serve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/front"
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
// could not listen, or why serving stopped before ctx was done. It is
// internal/front's Run for a server that brings its own http.Server and
// has no front of its own (rebound chaos).
func Run(ctx context.Context, c Config) error {
	return front.Run(ctx, front.Config{
		Addr:       c.Addr,
		Wrap:       c.Listener,
		Server:     c.Server,
		Stdout:     c.Stdout,
		Path:       c.Path,
		Drain:      c.Drain,
		Stopping:   c.Stopping,
		Unfinished: c.Unfinished,
	})
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
