package mcprun

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/rebound-go/rebound/internal/frontdoor"
	reboundmcp "github.com/rebound-go/rebound/mcp"
)

// TestSessionTimeout: a session with no request for the session timeout
// is ended, and its relay returns; a request still open (a GET's event
// stream) keeps it, and the timeout counts from when the last one ends.
// In virtual time; no server is ever started, since nothing is sent.
func TestSessionTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		door, _ := frontdoor.New(frontdoor.Options{})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		const timeout = time.Minute
		f := newFront(ctx, door, func() *reboundmcp.Transport {
			return reboundmcp.New(reboundmcp.Command(exec.Command("true")), reboundmcp.Options{})
		}, 4, timeout)
		defer f.closeAll()

		idle, err := f.start(jsonrpc.ID{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(timeout - time.Second)
		synctest.Wait()
		if isClosed(idle.done) {
			t.Fatal("the session ended before its timeout")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if !isClosed(idle.done) {
			t.Fatal("the session outlived its timeout")
		}

		busy, _ := f.start(jsonrpc.ID{}, 0)
		getCtx, endGET := context.WithCancel(t.Context())
		get := httptest.NewRequestWithContext(getCtx, "GET", Path, nil)
		get.Header.Set("Accept", "text/event-stream")
		served := make(chan struct{})
		go func() { busy.serve(httptest.NewRecorder(), get); close(served) }()
		time.Sleep(3 * timeout)
		synctest.Wait()
		if isClosed(busy.done) {
			t.Fatal("a session with a request open was ended")
		}
		endGET()
		<-served
		time.Sleep(timeout + time.Second)
		synctest.Wait()
		if !isClosed(busy.done) {
			t.Fatal("the session outlived its timeout after its last request")
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.sessions) != 0 {
			t.Errorf("%d sessions left", len(f.sessions))
		}
	})
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
