package mcprun

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound/internal/npmserver"
	reboundmcp "github.com/rebound-go/rebound/mcp"
)

// TestStatelessProgressKeepsItsOwnCallAlive: two stateless clients that
// happen to use the same progress token (an SDK's client numbers its
// tokens as it numbers its requests, from the same start) each keep their
// own call alive with its progress: the shared upstream must not let the
// second call take the first's token, so that, once the second ends, the
// first's progress keeps nothing alive and it is cancelled as idle
// (IdleTimeout) while its server still reports progress.
func TestStatelessProgressKeepsItsOwnCallAlive(t *testing.T) {
	for _, sameToken := range []bool{false, true} {
		t.Run(fmt.Sprintf("same token %v", sameToken), func(t *testing.T) {
			cmd := npmserver.EverythingStdio(t)
			h := newHandler(t.Context(), func() *reboundmcp.Transport {
				return reboundmcp.New(reboundmcp.Command(cmd), reboundmcp.Options{IdleTimeout: 2 * time.Second})
			}, 4, 0)
			srv := httptest.NewServer(h)
			defer srv.Close()
			defer h.Close()
			long := func(token string, seconds int) string {
				return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":` +
					fmt.Sprint(seconds) + `,"steps":` + fmt.Sprint(seconds*4) + `},"_meta":{"progressToken":` + token + `,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
			}
			var wg sync.WaitGroup
			var first string
			started := make(chan struct{})
			wg.Go(func() {
				close(started)
				_, first = postStateless(t, context.Background(), srv.URL, long("0", 6))
			})
			<-started
			awaitWaiting(t, h, 1) // the first is with the server
			second := "1"
			if sameToken {
				second = "0"
			}
			// The second call, shorter, starts while the first runs.
			if status, body := postStateless(t, t.Context(), srv.URL, long(second, 1)); status != 200 || strings.Contains(body, `"error"`) {
				t.Fatalf("the second call: %d %s", status, body)
			}
			wg.Wait()
			if !strings.Contains(first, "Long running operation completed") {
				t.Errorf("the first call, its progress reported all along: %.300s", first)
			}
		})
	}
}

// awaitWaiting waits until n stateless requests of h wait for the
// server's answer (a real server's: its time is not virtual), for a
// minute at most.
func awaitWaiting(t *testing.T, h *Handler, n int) {
	t.Helper()
	for range 6000 {
		h.mu.Lock()
		u := h.stateless[""]
		h.mu.Unlock()
		if u != nil {
			u.mu.Lock()
			waiting := len(u.waits)
			u.mu.Unlock()
			if waiting >= n {
				return
			}
		}
		time.Sleep(10 * time.Millisecond) // polling a server process: no event to wait on
	}
	t.Fatalf("%d requests never waited for the server", n)
}
