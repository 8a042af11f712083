package proxy_test

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/proxy"
)

// graceful is a handler with a Shutdown method, as an MCP server's
// handler is: Shutdown waits for release (its calls in flight) or for its
// context, and notes which came first and when.
type graceful struct {
	release       chan struct{}
	cut, finished atomic.Int64 // Shutdowns cut short, and let finish
	at            atomic.Int64 // when the last Shutdown ended, in Unix ns
}

func (g *graceful) ServeHTTP(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }

func (g *graceful) Shutdown(ctx context.Context) error {
	select {
	case <-g.release:
		g.finished.Add(1)
	case <-ctx.Done():
		g.cut.Add(1)
	}
	g.at.Store(time.Now().UnixNano())
	return nil
}

// TestReplacedMCPServerFinishesItsCallsWithinTheGrace: a server a reload
// removes is shut down, not closed: CloseReplaced returns at once, its
// handler finishes its calls in flight when they end within the grace,
// is cut short at the grace's end when they do not, and at once when the
// proxy closes.
func TestReplacedMCPServerFinishesItsCallsWithinTheGrace(t *testing.T) {
	for _, c := range []struct {
		name      string
		callsEnd  time.Duration // when the calls in flight end; 0: never
		closeAt   time.Duration // when the proxy closes; 0: at the end
		finished  bool
		endsAfter time.Duration
	}{
		{"calls end within the grace", 10 * time.Second, 0, true, 10 * time.Second},
		{"calls outlast the grace", 0, 0, false, 30 * time.Second},
		{"the proxy closes first", 0, 5 * time.Second, false, 5 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := &graceful{release: make(chan struct{})}
				mk := func(name string, _ proxy.MCPServerConfig, _ *slog.Logger, _ rebound.Observer) (http.Handler, error) {
					if name == "old" {
						return g, nil
					}
					return closerFunc(func() {}), nil
				}
				servers := func(js string) *proxy.FileConfig {
					return config(t, `{"upstreams": {"default": {"url": "http://127.0.0.1:1"}}, "mcp_servers": {`+js+`}}`, nil)
				}
				p, err := proxy.New(proxy.Options{Config: servers(`"old": {"command": ["a"]}`), MCPServer: mk})
				if err != nil {
					t.Fatal(err)
				}
				q, err := p.Reload(servers(`"new": {"command": ["a"]}`))
				if err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				q.CloseReplaced(30 * time.Second)
				if time.Since(start) != 0 {
					t.Errorf("CloseReplaced took %v, want it to return at once", time.Since(start))
				}
				if c.callsEnd > 0 {
					time.AfterFunc(c.callsEnd, func() { close(g.release) })
				}
				if c.closeAt > 0 {
					time.Sleep(c.closeAt)
					q.Close()
				}
				time.Sleep(time.Minute)
				synctest.Wait()
				q.Close()
				if got := g.finished.Load() == 1; got != c.finished || g.finished.Load()+g.cut.Load() != 1 {
					t.Errorf("finished %d, cut %d; want finished %v", g.finished.Load(), g.cut.Load(), c.finished)
				}
				if took := time.Unix(0, g.at.Load()).Sub(start); took != c.endsAfter {
					t.Errorf("shut down after %v, want %v", took, c.endsAfter)
				}
			})
		})
	}
}
