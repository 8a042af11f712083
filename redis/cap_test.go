package reboundredis

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/testclock"
)

func capError(t *testing.T, err error) *cost.CapError {
	t.Helper()
	var ce *cost.CapError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v; want a *cost.CapError", err)
	}
	return ce
}

// TestCapProtocol: holds count against the cap until they settle, at the
// real amount; a refusal carries the shared figures, the other replicas'
// shares among what is held; a hold of nothing is refused at the cap.
func TestCapProtocol(t *testing.T) {
	s := testStore(t)
	cfg := CapConfig{USD: 1, Replicas: 2}
	c := s.Cap("tenant", cfg)
	ctx := context.Background()
	h1, err := c.Reserve(ctx, 0.6)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Reserve(ctx, 0.5)
	if ce := capError(t, err); ce.Cap != "tenant" || ce.Limit != 1 || ce.Spent != 0 || ce.Held != 0.6 || ce.Need != 0.5 {
		t.Fatalf("refusal %+v", ce)
	}
	h1.Settle(0.2)
	h1.Settle(5) // once only
	// c now keeps half of the $0.8 left as its share.
	other := s.Cap("tenant", cfg)
	_, err = other.Reserve(ctx, 0.41)
	if ce := capError(t, err); ce.Spent != 0.2 || ce.Held != 0.4 {
		t.Fatalf("the other replica's refusal %+v; want $0.2 spent, $0.4 held (the first one's share)", ce)
	}
	h2, err := other.Reserve(ctx, 0.4)
	if err != nil {
		t.Fatalf("0.2 spent, 0.4 kept by a share, 0.4 more refused: %v", err)
	}
	h2.Settle(0.0000011) // rounded up, to 2 micro-dollars
	spent, _ := s.client.HGet(ctx, c.state().keys[0], "spent").Int64()
	if spent != 200002 {
		t.Fatalf("spent %d micro-dollars on Redis; want 200002", spent)
	}

	alone := s.Cap("alone", CapConfig{USD: 1})
	if _, err := alone.Reserve(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := alone.Reserve(ctx, 0); err == nil {
		t.Fatal("a hold of nothing at the cap was allowed")
	}
}

// TestCapHoldsExpire: the hold of a replica that died stops counting when
// its lease ends (the lease's end is brought forward on Redis, rather than
// waited for); its settle, if it comes after all, still counts.
func TestCapHoldsExpire(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	dead := s.Cap("t", CapConfig{USD: 1, Replicas: 2})
	h, err := dead.Reserve(ctx, 0.7)
	if err != nil {
		t.Fatal(err)
	}
	live := s.Cap("t", CapConfig{USD: 1, Replicas: 2})
	if _, err := live.Reserve(ctx, 0.3); err == nil {
		t.Fatal("0.7 held, 0.3 more allowed beside the dead replica's share")
	}
	leases := live.state().keys[1]
	members, _ := s.client.ZRange(ctx, leases, 0, -1).Result()
	for _, m := range members {
		s.client.ZAdd(ctx, leases, redis.Z{Score: 0, Member: m}) // the lease has ended
	}
	if _, err := live.Reserve(ctx, 0.9); err != nil {
		t.Fatalf("the dead replica's hold and share outlived their leases: %v", err)
	}
	h.Settle(0.05)
	spent, _ := s.client.HGet(ctx, leases[:len(leases)-len(":leases")], "spent").Int64()
	if spent != 50000 {
		t.Fatalf("a late settle left %d micro-dollars spent; want 50000", spent)
	}
}

// TestCapRollover: a day's cap starts again at midnight UTC by the
// caller's clock, on a key of its own; a month's on the first.
func TestCapRollover(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	for _, tc := range []struct {
		period        Period
		before, after time.Time
	}{
		{Day, time.Date(2025, 3, 31, 23, 59, 59, 0, time.UTC), time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)},
		{Month, time.Date(2025, 3, 31, 23, 59, 59, 0, time.UTC), time.Date(2025, 4, 1, 0, 0, 0, 0, time.UTC)},
		{Month, time.Date(2025, 3, 15, 0, 0, 0, 0, time.UTC), time.Date(2025, 3, 31, 23, 0, 0, 0, time.UTC)},
	} {
		clock := testclock.New(tc.before)
		c := s.Cap("roll"+tc.before.String()+tc.after.String(), CapConfig{USD: 1, Period: tc.period, Clock: clock})
		h, err := c.Reserve(ctx, 0.9)
		if err != nil {
			t.Fatal(err)
		}
		h.Settle(0.9)
		clock.Set(tc.after)
		_, err = c.Reserve(ctx, 0.2)
		rolled := tc.before.Month() != tc.after.Month() || tc.period == Day && tc.before.Day() != tc.after.Day()
		if rolled != (err == nil) {
			t.Errorf("period %d, %v then %v: Reserve = %v", tc.period, tc.before, tc.after, err)
		}
	}
}

// TestCapConcurrent: many goroutines of several replicas reserving at
// once never pass the cap, and use most of it.
func TestCapConcurrent(t *testing.T) {
	s := testStore(t)
	const replicas = 4
	var spent atomic.Int64 // micro-dollars settled
	var wg sync.WaitGroup
	for range replicas {
		c := s.Cap("many", CapConfig{USD: 2, Replicas: replicas})
		for range 8 {
			wg.Go(func() {
				for {
					h, err := c.Reserve(context.Background(), 0.02)
					if err != nil {
						capError(t, err)
						return
					}
					spent.Add(15000)
					h.Settle(0.015)
				}
			})
		}
	}
	wg.Wait()
	got := dollars(spent.Load())
	t.Logf("$%.4f settled of a $2 cap", got)
	if got > 2 || got < 1.8 {
		t.Fatalf("$%.4f settled of a $2 cap; want at most 2 and at least 1.8", got)
	}
}

// TestCapKilledRedis is the proof of Cap's doc at work: replicas spend
// through Redis, Redis is killed, and each goes on locally on its share
// until refused; together they never pass the cap. Redis then comes back
// empty (it kept nothing on disk), and what each replica spent locally
// reaches it exactly once.
func TestCapKilledRedis(t *testing.T) {
	srv := startRedis(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const (
		replicas = 4
		capUSD   = 1.0
	)
	var (
		total   atomic.Int64 // micro-dollars settled, by every replica
		locally atomic.Int64 // of which while Redis was dead
		dead    atomic.Bool
		killed  = make(chan struct{})
		once    sync.Once
	)
	// Every replica is made before any spends: a replica made while the
	// others spend could find Redis killed already.
	var caps []*Cap
	prefix := ""
	for i := range replicas {
		cfg := testConfig(t, srv.URL())
		if i == 0 {
			prefix = cfg.Prefix
		}
		cfg.Prefix = prefix // one cap, shared
		cfg.RetryEvery = 20 * time.Millisecond
		store, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		caps = append(caps, store.Cap("killed", CapConfig{USD: capUSD, Replicas: replicas}))
	}
	var wg sync.WaitGroup
	for i, c := range caps {
		for g := range 4 {
			r := rand.New(rand.NewPCG(seed, uint64(i*10+g)))
			wg.Go(func() {
				for {
					need := 0.005 + 0.01*r.Float64()
					h, err := c.Reserve(context.Background(), need)
					if err != nil {
						capError(t, err)
						if dead.Load() {
							return
						}
						<-killed // refused with Redis up: wait for the outage, then go on
						continue
					}
					real := micros(need * r.Float64())
					if total.Add(real) > 400000 {
						once.Do(func() { srv.Stop(); dead.Store(true); close(killed) })
					}
					if dead.Load() {
						locally.Add(real)
					}
					h.Settle(dollars(real))
				}
			})
		}
	}
	wg.Wait()
	got := dollars(total.Load())
	t.Logf("$%.4f settled of a $%.2f cap, $%.4f of it while Redis was dead", got, capUSD, dollars(locally.Load()))
	if got > capUSD {
		t.Fatalf("the replicas settled $%.4f together; the cap is $%.2f", got, capUSD)
	}
	if locally.Load() == 0 {
		t.Fatal("nothing was spent on the local shares")
	}

	srv.Start()
	settle := func() int64 {
		for _, c := range caps {
			eventually(t, "Redis heard back", func() bool {
				h, err := c.Reserve(context.Background(), 0)
				if err == nil {
					h.Settle(0)
				}
				return !c.store.down.Load()
			})
		}
		n, _ := caps[0].store.client.HGet(context.Background(), caps[0].state().keys[0], "spent").Int64()
		return n
	}
	folded := settle()
	again := settle()
	t.Logf("Redis, started again empty, heard of $%.4f spent", dollars(folded))
	// What was settled without Redis reaches it, and once: the empty
	// Redis hears no more than was settled, nothing a second time.
	if folded < locally.Load() || folded > total.Load() || again != folded {
		t.Fatalf("Redis heard of %d micro-dollars, then %d; %d were settled while it was dead, %d in all", folded, again, locally.Load(), total.Load())
	}
}
