package reboundredis

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/ratelimit"
	"github.com/rebound-go/rebound/tool"
)

// TestRedisKilledMidRun runs every shared part on a Redis that is killed
// mid-run and started again: no caller sees an error that local state
// would not give, no decision waits for Redis longer than the timeout, and
// shared decisions resume within a second of Redis's return.
func TestRedisKilledMidRun(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	// The timeout is wider than the 5 ms default: under the race detector
	// on a shared machine a live Redis's answer takes that long at times,
	// and this test must tell a slow answer from a dead server's.
	cfg.Timeout, cfg.RetryEvery = 25*time.Millisecond, 100*time.Millisecond
	// OnChange may hear more than one going and coming: under the race
	// detector a live Redis's answer is now and then later than the
	// timeout, and a late answer is treated as an absence. What must
	// hold is that Redis, once started again, is heard back.
	var (
		changesMu sync.Mutex // guards ups and downs
		ups       []time.Time
		downs     int
	)
	cfg.OnChange = func(up bool, err error) {
		changesMu.Lock()
		defer changesMu.Unlock()
		if up {
			ups = append(ups, time.Now())
		} else {
			downs++
		}
	}
	store, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	brk := NewBreaker(store, "outage", breaker.Config{})
	// A limit no worker reaches: the point is that every decision is made,
	// shared or local, not that calls wait.
	lim := NewLimiter(store, "outage", ratelimit.Config{RequestsPerMinute: 6e6, TokensPerMinute: 6e8})
	cool := NewCooldowns(store)
	records, err := NewRecords(store, RecordsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tools := &tool.Registry{Records: records}
	var actions atomic.Int64
	tools.Register("act", tool.Spec{Kind: tool.SideEffect}, func(ctx context.Context, c tool.Call) (string, error) {
		actions.Add(1)
		return "done", nil
	})

	const workers = 4
	var (
		mu      sync.Mutex // guards slowest and errs
		slowest time.Duration
		errs    []string
	)
	decide := func(what string, f func() error) {
		start := time.Now()
		err := f()
		d := time.Since(start)
		mu.Lock()
		defer mu.Unlock()
		slowest = max(slowest, d)
		if err != nil && len(errs) < 10 {
			errs = append(errs, what+": "+err.Error())
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var calls atomic.Int64
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				calls.Add(1)
				ctx := context.Background()
				decide("limiter", func() error { return lim.Wait(ctx, 100) })
				decide("breaker", func() error {
					p, err := brk.Allow()
					if err == nil {
						brk.Done(p, rebound.OutcomeSuccess)
					}
					return err
				})
				decide("cool-down", func() error {
					if cool.Cooling(ctx, "outage-target", time.Now()) {
						return fmt.Errorf("a target no one put in cool-down is cooling")
					}
					return nil
				})
				decide("records", func() error {
					res := tools.Execute(ctx, tool.Call{ID: fmt.Sprintf("call-%d-%d", w, i), Name: "act", Arguments: []byte(`{}`)})
					if res.Failure != nil {
						return fmt.Errorf("%s", res.Failure.Error)
					}
					return nil
				})
			}
		})
	}
	// Real time: the test is about a real server going away and coming
	// back while calls run.
	time.Sleep(500 * time.Millisecond)
	srv.Stop()
	time.Sleep(time.Second)
	restarting := time.Now()
	srv.Start()
	started := time.Now()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()

	for _, e := range errs {
		t.Errorf("a caller saw %s", e)
	}
	if int(actions.Load()) != int(calls.Load()) {
		t.Errorf("%d calls made %d actions", calls.Load(), actions.Load())
	}
	// A decision may also wait for the scheduler on a busy machine; what
	// it must not do is wait for Redis past the timeout more than once.
	if limit := 2*cfg.Timeout + 100*time.Millisecond; slowest > limit {
		t.Errorf("the slowest decision took %v, beyond %v", slowest, limit)
	}
	changesMu.Lock()
	defer changesMu.Unlock()
	var back time.Time // the first time Redis was heard back after it started again
	for _, at := range ups {
		if at.After(restarting) {
			back = at
			break
		}
	}
	if downs == 0 || back.IsZero() {
		t.Fatalf("OnChange heard Redis go %d times and come back at %v, want it gone and back", downs, ups)
	}
	// Redis answers a little before Start returns, and a decision may
	// find it then: a resumption "before" started is one at once.
	resumed := max(back.Sub(started), 0)
	if resumed > time.Second {
		t.Errorf("shared decisions resumed %v after Redis came back, want within 1 s", resumed)
	}
	t.Logf("%d rounds of decisions by %d workers; the slowest decision took %v; shared again %v after Redis's return",
		calls.Load(), workers, slowest, resumed.Round(time.Millisecond))
}
