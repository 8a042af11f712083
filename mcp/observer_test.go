package reboundmcp

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound"
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
