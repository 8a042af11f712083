package reboundredis

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/ratelimit"
	"github.com/rebound-go/rebound/tool"
)

// How long a decision waits for Redis is tested here, in a synctest
// bubble, against a Redis that a client hook plays: time is virtual, so
// every bound is exact, and no load on the machine can move it.

// fakeRedis plays a Redis server for a client: each command gets the
// answer answer gives it, or, when that is nil, waits for its context to
// end, as on a Redis that stopped (SIGSTOP) or a network that drops
// packets.
type fakeRedis struct {
	mu     sync.Mutex // guards answer
	answer func(script string, cmd redis.Cmder) any
	sent   atomic.Int64
}

// answers sets what the fake answers from now; nil stalls every command.
func (f *fakeRedis) answers(answer func(script string, cmd redis.Cmder) any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = answer
}

func (f *fakeRedis) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *fakeRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f *fakeRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f.sent.Add(1)
		f.mu.Lock()
		answer := f.answer
		f.mu.Unlock()
		if answer != nil {
			script, _ := cmd.Args()[1].(string) // EVALSHA's hash, EVAL's source
			if v := answer(script, cmd); v != nil {
				cmd.(*redis.Cmd).SetVal(v)
				return nil
			}
		}
		<-ctx.Done()
		cmd.SetErr(ctx.Err())
		return ctx.Err()
	}
}

// fakeStore returns a Store of cfg on f, and a function that closes its
// client, to be called before the bubble ends.
func fakeStore(t *testing.T, cfg Config, f *fakeRedis) (*Store, func()) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled: f answers
	c.AddHook(f)
	cfg.Client = c
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, func() { c.Close() }
}

// timed returns how long f took, in the bubble's time.
func timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

// TestStoreWaitsForAStalledRedisNoLongerThanTimeout: with the defaults, a
// decision that meets a stalled Redis waits for it one Timeout and no
// more; until RetryEvery has passed the decisions after it do not try
// Redis at all; then one decision of many at once tries it; and once Redis
// answers again, a decision finds it within RetryEvery.
func TestStoreWaitsForAStalledRedisNoLongerThanTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f fakeRedis
		var h heard
		s, closeClient := fakeStore(t, Config{OnChange: h.onChange}, &f)
		defer closeClient()
		ctx := context.Background()
		var err error
		decide := func() { _, err = s.run(ctx, echo, nil, "x") }

		if d := timed(decide); d != DefaultTimeout || !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("the first decision on a stalled Redis: %v after %v; want ErrUnavailable after the Timeout, %v", err, d, DefaultTimeout)
		}
		h.check(t, "deadline exceeded", false)
		for i := range 5 {
			if d := timed(decide); d != 0 || err != ErrUnavailable {
				t.Fatalf("decision %d within RetryEvery: %v after %v; want ErrUnavailable at once", i, err, d)
			}
			time.Sleep(DefaultRetryEvery/5 - time.Millisecond)
		}
		if n := f.sent.Load(); n != 1 {
			t.Fatalf("%d commands sent; want the first decision's alone", n)
		}

		time.Sleep(DefaultRetryEvery)
		var waited [10]time.Duration
		var wg sync.WaitGroup
		for i := range waited {
			wg.Go(func() { waited[i] = timed(func() { s.run(ctx, echo, nil, "x") }) })
		}
		wg.Wait()
		tried := 0
		for _, d := range waited {
			switch d {
			case DefaultTimeout:
				tried++
			case 0:
			default:
				t.Errorf("a decision waited %v", d)
			}
		}
		if tried != 1 || f.sent.Load() != 2 {
			t.Errorf("once RetryEvery passed, %d of 10 decisions at once waited for Redis, %d commands sent in all; want one", tried, f.sent.Load())
		}

		f.answers(func(string, redis.Cmder) any { return "x" })
		back := time.Now()
		for decide(); err != nil; decide() {
			time.Sleep(time.Millisecond)
		}
		if d := time.Since(back); d > DefaultRetryEvery {
			t.Errorf("Redis answered again; a decision found it %v later, want within RetryEvery (%v)", d, DefaultRetryEvery)
		}
		h.check(t, "deadline exceeded", false, true)
		if n := s.Stats().Errors; n != 2 {
			t.Errorf("Stats().Errors = %d; want the 2 round trips that met the stall", n)
		}
	})
}

// TestEveryPartWaitsForAStalledRedisNoLongerThanTimeout: each part's first
// decision on a stalled Redis waits one Timeout, and is made locally; the
// decisions after it, within RetryEvery, wait for nothing.
func TestEveryPartWaitsForAStalledRedisNoLongerThanTimeout(t *testing.T) {
	const timeout = 20 * time.Millisecond
	ctx := context.Background()
	type decision struct {
		what string
		do   func(t *testing.T)
	}
	for _, tc := range []struct {
		part      string
		decisions func(s *Store) []decision
	}{
		{"breaker", func(s *Store) []decision {
			b := NewBreaker(s, "gpt-x", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Hour})
			allow := func(t *testing.T) {
				if p, err := b.Allow(); err == nil {
					b.Done(p, rebound.OutcomeFailure)
				}
			}
			return []decision{{"an Allow and its Done", allow}, {"a local Allow and Done", allow}, {"a refusal", func(t *testing.T) {
				if _, err := b.Allow(); !errors.Is(err, breaker.ErrOpen) {
					t.Errorf("after a failure: %v; want the local breaker open", err)
				}
			}}}
		}},
		{"limiter", func(s *Store) []decision {
			l := NewLimiter(s, "model", ratelimit.Config{RequestsPerMinute: 6e6})
			return []decision{
				{"Allow", func(t *testing.T) { l.Allow(1) }},
				{"Wait", func(t *testing.T) { l.Wait(ctx, 1) }},
				{"Correct", func(t *testing.T) { l.Correct(1, 10) }},
				{"Learn", func(t *testing.T) {
					l.Learn(rateHeader("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s"))
				}},
			}
		}},
		{"cooldowns", func(s *Store) []decision {
			c := NewCooldowns(s)
			return []decision{
				{"Start", func(t *testing.T) { c.Start(ctx, "a", time.Now(), time.Minute) }},
				{"Cooling, started here", func(t *testing.T) {
					if !c.Cooling(ctx, "a", time.Now()) {
						t.Error("a cool-down started here was forgotten")
					}
				}},
				{"Cooling, another target", func(t *testing.T) { c.Cooling(ctx, "b", time.Now()) }},
			}
		}},
		{"records", func(s *Store) []decision {
			r, _ := NewRecords(s, RecordsConfig{})
			return []decision{
				{"Claim and Complete", func(t *testing.T) {
					c, err := r.Claim(ctx, "k", time.Minute)
					if err != nil || !strings.HasPrefix(c.Token, localToken) {
						t.Fatalf("a claim on a stalled Redis: %+v %v; want a local one", c, err)
					}
					r.Complete(ctx, "k", c.Token, tool.Record{Output: "done"})
				}},
				{"Claim of another key", func(t *testing.T) { r.Claim(ctx, "j", time.Minute) }},
			}
		}},
		{"cap", func(s *Store) []decision {
			c := s.Cap("tenant", CapConfig{USD: 1})
			reserve := func(t *testing.T) {
				if h, err := c.Reserve(ctx, 0.1); err == nil {
					h.Settle(0.1)
				}
			}
			return []decision{{"Reserve", reserve}, {"another Reserve", reserve}}
		}},
	} {
		t.Run(tc.part, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var f fakeRedis
				s, closeClient := fakeStore(t, Config{Timeout: timeout, RetryEvery: time.Hour}, &f)
				defer closeClient()
				for i, d := range tc.decisions(s) {
					want := time.Duration(0)
					if i == 0 {
						want = timeout
					}
					if got := timed(func() { d.do(t) }); got != want {
						t.Errorf("%s took %v on a stalled Redis; want %v", d.what, got, want)
					}
				}
			})
		})
	}
}

// TestRecordsPayloadTimeoutGrowsWithTheRecord: a round trip that carries a
// record, written or read, may take the Timeout and a millisecond more for
// each 64 KiB of it, and no longer.
func TestRecordsPayloadTimeoutGrowsWithTheRecord(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size = 512 << 10
		var f fakeRedis
		f.answers(func(script string, cmd redis.Cmder) any {
			us := time.Now().UnixMicro()
			switch {
			case script == timeScript.Hash():
				return us
			case script == claimScript.Hash() && strings.HasSuffix(cmd.Args()[3].(string), ":long"):
				return []any{us, "long", int64(size)}
			case script == claimScript.Hash():
				return []any{us, "claimed", "0"}
			}
			return nil // the record's round trips stall
		})
		s, closeClient := fakeStore(t, Config{}, &f)
		defer closeClient()
		r, _ := NewRecords(s, RecordsConfig{})
		ctx := context.Background()
		grown := DefaultTimeout + (size>>16)*time.Millisecond

		c, err := r.Claim(ctx, "short", time.Minute)
		if err != nil || !strings.HasPrefix(c.Token, sharedToken) {
			t.Fatalf("%+v %v", c, err)
		}
		rec := tool.Record{Output: strings.Repeat("x", size)}
		if d := timed(func() { err = r.Complete(ctx, "short", c.Token, rec) }); d != grown || !errors.Is(err, ErrUnavailable) {
			t.Errorf("writing a record of %d bytes on a stalled Redis: %v after %v; want ErrUnavailable after %v", size, err, d, grown)
		}

		time.Sleep(DefaultRetryEvery)
		if d := timed(func() { c, err = r.Claim(ctx, "long", time.Minute) }); d != grown || err != nil || !strings.HasPrefix(c.Token, localToken) {
			t.Errorf("reading a record of %d bytes on a stalled Redis: %+v %v after %v; want a local claim after %v", size, c, err, d, grown)
		}
	})
}
