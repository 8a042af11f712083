package mcprun

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// TestShutdownWaitsForThePOSTsInFlight: Shutdown refuses new sessions at
// once, waits for the POSTs in flight (not for an event stream, a GET,
// which may stay open for hours), and closes when the last has ended, or
// when its context is done.
func TestShutdownWaitsForThePOSTsInFlight(t *testing.T) {
	for _, cut := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			h := newHandler(t.Context(), func() *reboundmcp.Transport {
				return reboundmcp.New(reboundmcp.Command(exec.Command("true")), reboundmcp.Options{})
			}, 4, 0)
			endGET := h.begin(httptest.NewRequest("GET", Path, nil))
			defer endGET()
			endPOST := h.begin(httptest.NewRequest("POST", Path, nil))
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			start := time.Now()
			shut := make(chan struct{})
			go func() { h.Shutdown(ctx); close(shut) }()
			synctest.Wait()
			if _, err := h.start(jsonrpc.ID{}, proxy.MCPCaller{}); err == nil {
				t.Error("a session opened after Shutdown began")
			}
			if isClosed(shut) {
				t.Fatal("Shutdown returned with a POST in flight")
			}
			want := time.Minute // its context's end
			if !cut {
				time.Sleep(10 * time.Second)
				endPOST()
				want = 10 * time.Second
			}
			<-shut
			if took := time.Since(start); took != want {
				t.Errorf("Shutdown returned after %v, want %v", took, want)
			}
			if cut {
				endPOST()
			}
		})
	}
}
