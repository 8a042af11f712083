package reboundmcp

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/observe"
)

// TestPanickingObserverNeitherCrashesNorLosesTheCall: an Observer that
// panics runs on goroutines of the session's own (the call's, the
// supervisor's), where nothing of the caller's would recover it: the
// panic is logged, the event dropped, and the call (through a crash and a
// restart, so that every kind of event is sent) answered as without it.
func TestPanickingObserverNeitherCrashesNorLosesTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
			if run == 1 {
				return crashMidCall(ctx, f)
			}
			return "read #2", nil
		}
		var logs logBuffer
		obs := rebound.ObserverFunc(func(rebound.Event) { panic("observer bug") })
		cs := connect(t, f, Options{Observer: obs, Logger: logs.logger()}, true, nil)
		if got, err := callText(t, cs, "read"); err != nil || got != "read #2" {
			t.Fatalf("%q, %v; want read #2", got, err)
		}
		if !strings.Contains(logs.String(), "observer bug") {
			t.Errorf("the observer's panic was not logged:\n%s", logs.String())
		}
	})
}

// operations records the Operations an Observer is handed.
type operations struct {
	mu  sync.Mutex
	ops []observe.Operation
}

func (o *operations) Observe(rebound.Event) {}

func (o *operations) RecordOperation(_ context.Context, op observe.Operation) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ops = append(o.ops, op)
}

// TestOperationsNameOnlyToolsTheServerListed: each client request reaches
// an OperationRecorder as an observe.Operation; a tool the server never
// listed is "other" there, so that a client making names up grows no
// series, and a failure carries its outcome as its error type.
func TestOperationsNameOnlyToolsTheServerListed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		rec := &operations{}
		cs := connect(t, f, Options{Observer: rec}, true, nil)
		if _, err := callText(t, cs, "read"); err != nil {
			t.Fatal(err)
		}
		callText(t, cs, "made-up-1")
		cs.Close()
		synctest.Wait()
		rec.mu.Lock()
		defer rec.mu.Unlock()
		var calls []string
		for _, op := range rec.ops {
			if op.Kind != "mcp" || op.Method == "" {
				t.Errorf("operation %+v, want kind mcp and its method", op)
			}
			if op.Method == "tools/call" {
				calls = append(calls, op.Tool+" "+op.ErrorType)
			}
		}
		// The server answers the made-up tool with a JSON-RPC error.
		if !slices.Equal(calls, []string{"read ", "other error"}) {
			t.Errorf("tools/call operations %q, want read (no error) and other with its error", calls)
		}
	})
}
