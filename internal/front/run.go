package front

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/rebound-go/rebound/internal/frontdoor"
)

// Config is how Run serves. Its zero value serves nothing: Handler, or
// Server, is needed.
type Config struct {
	// Addr is where to listen, host:port; Listener, if set, is listened
	// on instead (a test's, in memory).
	Addr     string
	Listener net.Listener
	// Wrap, if set, wraps the listener the server accepts on.
	Wrap func(net.Listener) net.Listener
	// Handler is served by a server with the limits of every server of
	// rebound's (frontdoor.Server), its own error lines to ErrorLog (nil:
	// standard error). Server, if set, is served instead, as it is.
	Handler  http.Handler
	ErrorLog *log.Logger
	Server   *http.Server
	// Stdout is where the first line, "listening on http://HOST:PORT",
	// goes (nil: nowhere); Path, if set, ends it ("/mcp").
	Stdout io.Writer
	Path   string
	// Hangup, if set, is called at each SIGHUP while Run serves, one call
	// at a time: a server reloads its config, or logs that it has none
	// to reload. Without it SIGHUP is not caught here.
	Hangup func()
	// Drain is how long the requests in flight may finish once ctx is
	// done; zero means none: the connections are closed at once.
	Drain time.Duration
	// Stopping, if set, is called once ctx is done, after the last
	// Hangup has returned and before the drain: a server makes its
	// /readyz answer 503 and ends what would hold the drain open.
	// Unfinished, if set, is told of requests still in flight when the
	// drain ran out, before their connections are closed.
	Stopping   func()
	Unfinished func(err error)

	hangups chan os.Signal // a test's, for SIGHUP
}

// Run listens, says where on c.Stdout, and serves until ctx is done;
// then it stops accepting, lets the requests in flight finish for up to
// c.Drain, closes the connections still open, and returns nil. It
// returns why it could not listen, or why serving stopped before ctx was
// done.
func Run(ctx context.Context, c Config) error {
	ln := c.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", c.Addr); err != nil {
			return err
		}
	}
	// SIGHUP is caught before the first line: whoever reads it may send
	// one at once, and its default action would end the process.
	stopHangups := c.onHangup()
	if c.Stdout != nil {
		fmt.Fprintf(c.Stdout, "listening on http://%s%s\n", ln.Addr(), c.Path)
	}
	if c.Wrap != nil {
		ln = c.Wrap(ln)
	}
	srv := c.Server
	if srv == nil {
		srv = frontdoor.Server(c.Handler, c.ErrorLog)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		stopHangups()
		return err
	case <-ctx.Done():
	}
	stopHangups() // a reload under way ends first: what drains is the last
	if c.Stopping != nil {
		c.Stopping()
	}
	drainCtx, cancel := context.WithTimeout(context.Background(), c.Drain)
	defer cancel()
	if err := srv.Shutdown(drainCtx); err != nil {
		if c.Unfinished != nil {
			c.Unfinished(err)
		}
		srv.Close()
	}
	<-served // http.ErrServerClosed
	return nil
}

// onHangup calls c.Hangup at each SIGHUP until the returned stop is
// called; stop returns once a call under way has returned.
func (c *Config) onHangup() (stop func()) {
	if c.Hangup == nil {
		return func() {}
	}
	hangups := c.hangups
	if hangups == nil {
		hangups = make(chan os.Signal, 1)
		signal.Notify(hangups, syscall.SIGHUP)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-hangups:
				c.Hangup()
			}
		}
	})
	return sync.OnceFunc(func() {
		if c.hangups == nil {
			signal.Stop(hangups)
		}
		close(done)
		wg.Wait()
	})
}
