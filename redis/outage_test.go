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
// would not give, OnChange hears Redis go and come back, and decisions
// are shared again once it is. (How long a decision waits for Redis, and
// how soon shared decisions resume, is tested in virtual time, where no
// load on the machine moves it: TestStoreWaitsForAStalledRedisNoLongerThanTimeout,
// TestEveryPartWaitsForAStalledRedisNoLongerThanTimeout.)
func TestRedisKilledMidRun(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	cfg.RetryEvery = 100 * time.Millisecond
	var (
		changesMu sync.Mutex // guards changes
		changes   []bool
	)
	cfg.OnChange = func(up bool, err error) {
		changesMu.Lock()
		defer changesMu.Unlock()
		changes = append(changes, up)
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
	tools.Register("act", tool.Spec{Kind: tool.SideEffects}, func(ctx context.Context, c tool.Call) (string, error) {
		actions.Add(1)
		return "done", nil
	})

	const workers = 4
	var (
		mu   sync.Mutex // guards errs
		errs []string
	)
	decide := func(what string, f func() error) {
		err := f()
		mu.Lock()
		defer mu.Unlock()
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
	srv.Start()
	eventually(t, "Redis heard back", func() bool {
		changesMu.Lock()
		defer changesMu.Unlock()
		return len(changes) > 0 && changes[len(changes)-1] && !store.down.Load()
	})
	close(stop)
	wg.Wait()

	for _, e := range errs {
		t.Errorf("a caller saw %s", e)
	}
	if int(actions.Load()) != int(calls.Load()) {
		t.Errorf("%d calls made %d actions", calls.Load(), actions.Load())
	}
	changesMu.Lock()
	defer changesMu.Unlock()
	// More than one going and coming is possible: a decision refused
	// just before Redis listened again may be told so after another found
	// it back.
	if len(changes) < 2 || changes[0] {
		t.Errorf("OnChange heard %v; want Redis gone, then back", changes)
	}
	t.Logf("%d rounds of decisions by %d workers; %d round trips to Redis gave no decision", calls.Load(), workers, store.Stats().Errors)
}
