package reboundmcp

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
)

var errRefused = errors.New("refused")

// gaps returns the time between one start and the next.
func gaps(ts []time.Time) []time.Duration {
	var d []time.Duration
	for i := 1; i < len(ts); i++ {
		d = append(d, ts[i].Sub(ts[i-1]))
	}
	return d
}

func TestRestartsBackOffFromAtOnceTo2sAndTheBreakerPausesThemAfter10Crashes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.dialErr = func(int) error { return errRefused }
		var logs logBuffer
		conn, err := New(f.upstream(), Options{Logger: logs.logger()}).Connect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(70 * time.Second)
		synctest.Wait()
		conn.Close()
		g := gaps(f.startTimes())
		t.Logf("gaps between starts: %v", g)
		bounds := []struct{ lo, hi time.Duration }{
			{0, 0}, // the first restart at once
			{50 * time.Millisecond, 100 * time.Millisecond},
			{100 * time.Millisecond, 200 * time.Millisecond},
			{200 * time.Millisecond, 400 * time.Millisecond},
			{400 * time.Millisecond, 800 * time.Millisecond},
			{800 * time.Millisecond, 1600 * time.Millisecond},
			{time.Second, 2 * time.Second},
			{time.Second, 2 * time.Second},
			{time.Second, 2 * time.Second},
			{30 * time.Second, 30 * time.Second}, // the 10th crash opened the breaker: a probe after the cool-down
			{30 * time.Second, 30 * time.Second}, // the probe failed: open again at once
		}
		if len(g) < len(bounds) {
			t.Fatalf("%d restarts, want at least %d", len(g), len(bounds))
		}
		for i, b := range bounds {
			if g[i] < b.lo || g[i] > b.hi {
				t.Errorf("restart %d came after %v, want within [%v, %v]", i+1, g[i], b.lo, b.hi)
			}
		}
		if n := strings.Count(logs.String(), `"state":"open"`); n != 3 {
			t.Errorf("the breaker opened %d times in the log, want 3 (at about 6 s, 36 s and 66 s):\n%s", n, logs.String())
		}
	})
}

// TestRestartsBackOffWhateverTheCallersContextCarries: the restarts are
// the session's, not the caller's: a context marked as side-effecting
// (which would stop an engine's call at its first failure) changes
// nothing of their backoff.
func TestRestartsBackOffWhateverTheCallersContextCarries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.dialErr = func(int) error { return errRefused }
		conn, err := New(f.upstream(), Options{CrashLimit: -1}).Connect(rebound.WithSideEffects(t.Context()))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		conn.Close()
		g := gaps(f.startTimes())
		if len(g) < 3 || len(g) > 8 || g[0] != 0 || g[1] < 50*time.Millisecond {
			t.Errorf("gaps between starts %v; want at once, then from 50 ms, a few in 5 s", g)
		}
	})
}

func TestBackoffStartsOverAfterAHealthyRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		var logs logBuffer
		conn, err := New(f.upstream(), Options{Logger: logs.logger()}).Connect(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for i, lived := range []time.Duration{0, 0, 0, 11 * time.Second, 0} {
			f.awaitStarts(i + 1)
			time.Sleep(lived)
			f.crash()
		}
		f.awaitStarts(6)
		conn.Close()
		var delays []time.Duration
		for _, line := range logs.lines(t, "mcp.restart") {
			delays = append(delays, time.Duration(line["delay_ms"].(float64))*time.Millisecond)
		}
		t.Logf("restart delays: %v", delays)
		if len(delays) != 5 {
			t.Fatalf("%d restarts, want 5", len(delays))
		}
		if delays[0] != 0 || delays[1] < 50*time.Millisecond || delays[2] < 100*time.Millisecond {
			t.Errorf("want at once, then backing off")
		}
		if delays[3] != 0 || delays[4] < 50*time.Millisecond || delays[4] > 100*time.Millisecond {
			t.Errorf("want the restart after 11 s of health at once, and the backoff from the start after it")
		}
	})
}

// TestRespawnBreakerCountsTheCrashesWithinItsWindow: the respawn breaker
// is a breaker.Breaker whose window holds crashes alone: a server that
// dies every 5 s, never healthy, crashes 6 times in any 30 s, which does
// not reach the default limit of 10 and reaches a limit of 5.
func TestRespawnBreakerCountsTheCrashesWithinItsWindow(t *testing.T) {
	for _, c := range []struct {
		limit int
		opens bool
	}{{0, false}, {5, true}} {
		synctest.Test(t, func(t *testing.T) {
			f := newFake(t)
			var logs logBuffer
			conn, err := New(f.upstream(), Options{CrashLimit: c.limit, Logger: logs.logger()}).Connect(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			for i := range 15 {
				f.awaitStarts(i + 1)
				if strings.Contains(logs.String(), `"state":"open"`) {
					break
				}
				time.Sleep(5 * time.Second)
				f.crash()
			}
			conn.Close()
			if opened := strings.Contains(logs.String(), `"state":"open"`); opened != c.opens {
				t.Errorf("limit %d: the breaker opened: %v, want %v:\n%s", c.limit, opened, c.opens, logs.String())
			}
		})
	}
}

func TestCallsWaitForADownServerUpToDownWaitThenFailFast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		var up atomic.Bool
		f.dialErr = func(n int) error {
			if n == 1 || up.Load() {
				return nil
			}
			return errRefused
		}
		cs := connect(t, f, Options{DownWait: 3 * time.Second, CrashLimit: -1}, true, nil)
		synctest.Wait()
		f.crash()
		start := time.Now()
		_, err := callText(t, cs, "read")
		if took := time.Since(start); err == nil || !strings.Contains(err.Error(), ErrServerDown.Error()) || took != 3*time.Second {
			t.Fatalf("after %v: err = %v; want ErrServerDown after the 3 s down-wait", took, err)
		}
		start = time.Now()
		if _, err := callText(t, cs, "read"); err == nil || time.Since(start) != 0 {
			t.Fatalf("a call to a server down past the down-wait: err %v after %v, want at once", err, time.Since(start))
		}
		up.Store(true)
		time.Sleep(3 * time.Second) // the next restart
		if got, err := callText(t, cs, "read"); err != nil {
			t.Fatalf("the server back up: %q, %v", got, err)
		}
	})
}

func TestBreakerOpenFailsCallsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.dialErr = func(n int) error {
			if n == 1 {
				return nil
			}
			return errRefused
		}
		cs := connect(t, f, Options{CrashLimit: 2, DownWait: time.Hour}, true, nil)
		synctest.Wait()
		f.crash()
		synctest.Wait() // two crashes: the breaker is open
		start := time.Now()
		_, err := callText(t, cs, "read")
		if err == nil || !strings.Contains(err.Error(), "restarts are paused") || time.Since(start) != 0 {
			t.Fatalf("err = %v after %v; want the breaker's at once", err, time.Since(start))
		}
	})
}

func TestProgressKeepsALongCallAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		var progressed int
		f.onCall = func(ctx context.Context, f *fake, tool string, run int) (string, error) {
			return "", nil
		}
		srvHandler := func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			for i := range 6 {
				time.Sleep(30 * time.Second)
				req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i)})
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		}
		f.handlers = map[string]mcp.ToolHandler{"slow": srvHandler}
		cs := connect(t, f, Options{IdleTimeout: time.Minute}, true, &mcp.ClientOptions{
			ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed++ },
		})
		params := &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}}
		params.SetProgressToken("p1")
		start := time.Now()
		res, err := cs.CallTool(t.Context(), params)
		if err != nil || res.Content[0].(*mcp.TextContent).Text != "done" {
			t.Fatalf("res %v, err %v", res, err)
		}
		if took := time.Since(start); took != 3*time.Minute {
			t.Errorf("took %v", took)
		}
		synctest.Wait()
		if progressed != 6 {
			t.Errorf("the client saw %d progress notifications, want 6", progressed)
		}
	})
}

func TestClientIsToldOfAToolListThatChangedAcrossARestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.extra = func(start int) []string {
			if start > 1 {
				return []string{"new"}
			}
			return nil
		}
		changed := 0
		cs := connect(t, f, Options{}, true, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed++ },
		})
		synctest.Wait()
		f.crash()
		synctest.Wait()
		if changed != 1 {
			t.Fatalf("the client heard of %d tool list changes, want 1", changed)
		}
		res, err := cs.ListTools(t.Context(), nil)
		if err != nil || len(res.Tools) != 5 {
			t.Fatalf("tools %v, %v", res, err)
		}
	})
}
