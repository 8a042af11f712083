package reboundmcp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
)

func TestCallCutByACrashIsResentAsSoonAsTheNewServerIsReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
			if run == 1 {
				return crashMidCall(ctx, f)
			}
			return "read #2", nil
		}
		// Without jitter the Policy's backoff is its full base: a resend
		// that waited for it could not hide behind a short draw.
		cs := connect(t, f, Options{Policy: rebound.Policy{Jitter: rebound.JitterNone}}, true, nil)
		start := time.Now()
		if got, err := callText(t, cs, "read"); err != nil || got != "read #2" {
			t.Fatalf("got %q, %v; want read #2", got, err)
		}
		starts := f.startTimes()
		// The first restart is at once; the resend waits for that alone.
		if took, restart := time.Since(start), starts[len(starts)-1].Sub(start); took > restart {
			t.Errorf("the resend came %v after the crash, the new server was ready after %v: it waited for the Policy's backoff too", took, restart)
		}
	})
}

func TestLostHTTPSessionsAreReopenedAtOnce(t *testing.T) {
	f := newHTTPFake(t)
	var logs logBuffer
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), New(HTTP(f.srv.URL, nil), Options{Logger: logs.logger()}), &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for range 4 {
		f.restart()
		if _, err := callText(t, cs, "read"); err != nil {
			t.Fatal(err, logs.String())
		}
	}
	restarts := logs.lines(t, "mcp.restart")
	if len(restarts) != 4 {
		t.Fatalf("%d restarts logged, want 4:\n%s", len(restarts), logs.String())
	}
	for i, r := range restarts {
		if r["delay_ms"] != 0.0 || r["cause"] != errSessionLost.Error() {
			t.Errorf("restart %d: %v; want a lost session reopened at once", i+1, r)
		}
	}
}

func TestRequestRefusedForWantOfASessionBeforeInitializeIsAnsweredNotRetried(t *testing.T) {
	f := newHTTPFake(t)
	f.refusal = `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"},"id":null}`
	f.refuse = func(r *http.Request) (int, string) {
		// As the official TypeScript SDK's servers answer a request other
		// than initialize that comes without a session: a 400.
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" && !strings.Contains(string(body), `"initialize"`) {
			return http.StatusBadRequest, ""
		}
		return 0, ""
	}
	var logs logBuffer
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), New(HTTP(f.srv.URL, nil), Options{Logger: logs.logger()}), nil) // the latest protocol: server/discover first
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := callText(t, cs, "read"); err != nil {
		t.Fatal(err)
	}
	if r := logs.lines(t, "mcp.restart"); len(r) != 0 {
		t.Errorf("%d restarts before initialize, want none:\n%s", len(r), logs.String())
	}
	for _, r := range logs.requests(t) {
		if r["method"] == "server/discover" && (r["attempts"] != 1.0 || r["outcome"] != "error") {
			t.Errorf("server/discover: %v; want one attempt, answered with the server's error", r)
		}
	}
}
