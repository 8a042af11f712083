package reboundredis

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/ratelimit"
)

// These tests run against a real Redis, whose clock goes on while they
// run: they read the delays the script gives (reserve) rather than sleep
// through them, and give each a tolerance of a fraction of the pace.
const slack = 500 * time.Millisecond

// reserve reserves one call of tokens and returns its delay.
func reserve(t *testing.T, l *Limiter, tokens int) time.Duration {
	t.Helper()
	ok, d, err := l.decide(t.Context(), "wait", tokens, -1)
	if err != nil || !ok {
		t.Fatalf("reserving %d tokens: %v %v", tokens, ok, err)
	}
	return d
}

func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got < want-slack || got > want+slack {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
}

// paced returns the interval the Limiter keeps between units of a limit
// of n a minute with a burst of b: (n − b) per 60.5 s.
func paced(n, b float64) time.Duration {
	return time.Duration((time.Minute + arrivalMargin).Seconds() / (n - b) * float64(time.Second))
}

// replica returns another Store on the test Redis with s's prefix: a
// replica of the same service, with its own connections.
func replica(t *testing.T, s *Store) *Store {
	cfg := testConfig(t, redisURL())
	cfg.Prefix = s.prefix
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// commands counts the commands a client sends.
type commands struct{ n atomic.Int64 }

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

func rateHeader(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestLimiterBurstThenPace(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 6}) // a burst of 1, then 5 per 60.5 s
	if !l.Allow(1) || l.Allow(1) {
		t.Fatal("the burst is not one call")
	}
	step := paced(6, 1)
	near(t, "the first call after the burst waits", reserve(t, l, 1), step)
	near(t, "the second", reserve(t, l, 1), 2*step)

	l = NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 600})
	n := 0
	for l.Allow(1) {
		n++
	}
	if n != 10 {
		t.Fatalf("a burst of %d at 600 a minute, want a second's worth, 10", n)
	}
}

func TestLimiterTokens(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{TokensPerMinute: 600, TokenBurst: 100})
	if !l.Allow(60) || !l.Allow(40) || l.Allow(1) {
		t.Fatal("the burst is not 100 tokens")
	}
	step := paced(600, 100)
	near(t, "50 tokens after the burst", reserve(t, l, 50), 50*step)
	// A call larger than the burst is charged the burst.
	near(t, "1000 tokens", reserve(t, l, 1000), 150*step)
	if !NewLimiter(testStore(t), "model", ratelimit.Config{}).Allow(1 << 30) {
		t.Fatal("a Limiter with no limits refused a call")
	}
}

// TestLimiterBothLimits: a call held back by its tokens goes when the
// tokens allow, and is counted there by the requests limit too, so that
// calls the tokens held back do not all go at once.
func TestLimiterBothLimits(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 60, TokensPerMinute: 600, TokenBurst: 100})
	if !l.Allow(100) {
		t.Fatal("the first call was refused")
	}
	tok, req := paced(600, 100), paced(60, 1)
	near(t, "100 tokens more", reserve(t, l, 100), 100*tok)
	near(t, "then a call of no tokens", reserve(t, l, 0), 100*tok+req)
}

func TestLimiterRefusesPastTheDeadline(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 6})
	l.Allow(1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	if err := l.Wait(ctx, 1); !errors.Is(err, ratelimit.ErrDeadline) {
		t.Fatalf("Wait: %v, want ErrDeadline", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("the refusal took %v", d)
	}
	// The refused call reserved nothing: the next slot is one step away,
	// not two.
	near(t, "the next call", reserve(t, l, 1), paced(6, 1))

	// A slot within the deadline is waited for.
	l = NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 600})
	for l.Allow(1) {
	}
	start = time.Now()
	if err := l.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < paced(600, 10)/2 {
		t.Fatalf("waited %v for a slot %v away", d, paced(600, 10))
	}
}

func TestLimiterCorrect(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{TokensPerMinute: 600, TokenBurst: 100})
	l.Allow(100)
	l.Correct(100, 90) // fewer than estimated: nothing given back
	l.Correct(100, 150)
	step := paced(600, 100)
	near(t, "a call after 50 tokens more than estimated", reserve(t, l, 1), 51*step)
	l.Correct(0, 1000) // charged a burst at most
	near(t, "a call after a correction beyond the burst", reserve(t, l, 1), 152*step)
}

// TestLimiterLearnsForEveryReplica: what one replica learns from the
// provider's headers paces the others.
func TestLimiterLearnsForEveryReplica(t *testing.T) {
	cfg := ratelimit.Config{RequestsPerMinute: 600}
	s := testStore(t)
	a, b := NewLimiter(s, "model", cfg), NewLimiter(replica(t, s), "model", cfg)

	a.Learn(rateHeader("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "30s"))
	if b.Allow(1) {
		t.Fatal("a call went in another replica with no requests left")
	}
	near(t, "the next call in another replica", reserve(t, b, 1), 30*time.Second)
	if a.local.Allow(1) {
		t.Fatal("the local Limiter, for when Redis is away, did not learn")
	}

	// 20 requests left in a minute: the configured burst, then one every 3 s.
	c := NewLimiter(a.store, "other", cfg)
	d := NewLimiter(b.store, "other", cfg)
	c.Learn(rateHeader("x-ratelimit-remaining-requests", "20", "x-ratelimit-reset-requests", "1m"))
	for i := range 10 {
		if !d.Allow(1) {
			t.Fatalf("call %d of the burst refused", i)
		}
	}
	near(t, "after the burst at the learned pace", reserve(t, d, 1), 3*time.Second)
	// Plenty left: the configured pace is back, for every replica.
	c.Learn(rateHeader("x-ratelimit-remaining-requests", "590", "x-ratelimit-reset-requests", "1s"))
	first := reserve(t, d, 1)
	near(t, "the step between two calls", reserve(t, d, 1)-first, paced(600, 10))

	// Headers that change nothing cost no round trip.
	var sent commands
	c.store.client.AddHook(&sent)
	c.Learn(rateHeader("x-ratelimit-remaining-requests", "590", "x-ratelimit-reset-requests", "1s"))
	c.Learn(http.Header{})
	if n := sent.n.Load(); n != 0 {
		t.Fatalf("%d commands for headers that change nothing", n)
	}

	// With no limit configured, a provider's "nothing left" still holds
	// every replica until the reset.
	e, f := NewLimiter(a.store, "free", ratelimit.Config{}), NewLimiter(b.store, "free", ratelimit.Config{})
	reset := time.Now().Add(20 * time.Second).Truncate(time.Second) // the header's precision
	e.Learn(rateHeader("anthropic-ratelimit-tokens-remaining", "0",
		"anthropic-ratelimit-tokens-reset", reset.UTC().Format(time.RFC3339)))
	if f.Allow(1) {
		t.Fatal("a call went with no tokens left")
	}
	near(t, "the next call", reserve(t, f, 1), time.Until(reset))
}

// TestLimiterServerClockGoesBack: a Redis server whose clock is set back
// takes the times kept with it, so calls do not wait for it to catch up.
func TestLimiterServerClockGoesBack(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 6})
	l.Allow(1)
	// As if everything so far had happened an hour ahead of the clock:
	// the last time seen and the requests' arrival time, the key's first
	// and third doubles.
	c := l.store.client
	kept, err := c.Get(t.Context(), l.keys[0]).Bytes()
	if err != nil || len(kept) < 24 {
		t.Fatalf("the key holds %d bytes: %v", len(kept), err)
	}
	for _, i := range []int{0, 2} {
		x := math.Float64frombits(binary.LittleEndian.Uint64(kept[8*i:]))
		binary.LittleEndian.PutUint64(kept[8*i:], math.Float64bits(x+float64(time.Hour.Microseconds())))
	}
	if err := c.Set(t.Context(), l.keys[0], kept, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	near(t, "the next call", reserve(t, l, 1), paced(6, 1))
}

func TestLimiterKeyExpires(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 600})
	l.Allow(1)
	ttl, err := l.store.client.PTTL(t.Context(), l.keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Its times pass in a step; the key lives a second and a minute more.
	if want := paced(600, 10) + 61*time.Second + time.Millisecond; ttl <= 0 || ttl > want {
		t.Fatalf("the key expires in %v, want within %v", ttl, want)
	}
	// A call that needs it no longer leaves the expiry as it is.
	if !l.Allow(1) {
		t.Fatal("the second call of a burst of 10 was refused")
	}
	if again, _ := l.store.client.PTTL(t.Context(), l.keys[0]).Result(); again > ttl || again < ttl-time.Second {
		t.Fatalf("the key's expiry moved from %v to %v", ttl, again)
	}
}

// TestLimiterWithoutRedis: when Redis stops answering, every decision is
// made locally within the Store's timeout, as the in-memory Limiter would;
// once it answers again, decisions are shared again.
func TestLimiterWithoutRedis(t *testing.T) {
	srv := startRedis(t)
	open := func() *Store {
		cfg := testConfig(t, srv.URL())
		cfg.Timeout, cfg.RetryEvery = 50*time.Millisecond, 100*time.Millisecond
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cfg := ratelimit.Config{RequestsPerMinute: 6, TokensPerMinute: 6000}
	a := NewLimiter(open(), "model", cfg)
	b := NewLimiter(open(), "model", cfg)
	b.keys = a.keys // two replicas: two Stores, one state
	if !a.Allow(1) || b.Allow(1) {
		t.Fatal("the burst of one call was not shared")
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	bound := 50*time.Millisecond + 200*time.Millisecond // the timeout, and a slow machine
	for i, step := range []struct {
		name string
		do   func() bool
		want bool
	}{
		{"the local burst", func() bool { return b.Allow(1) }, true},
		{"after it", func() bool { return b.Allow(1) }, false},
		{"a wait past the deadline", func() bool { return errors.Is(b.Wait(ctx, 1), ratelimit.ErrDeadline) }, true},
		{"a correction", func() bool { b.Correct(1, 10); return true }, true},
		{"a lesson", func() bool {
			b.Learn(rateHeader("x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1m"))
			return true
		}, true},
	} {
		start := time.Now()
		if got := step.do(); got != step.want {
			t.Errorf("step %d, %s: %v without Redis, want %v", i, step.name, got, step.want)
		}
		if d := time.Since(start); d > bound {
			t.Errorf("step %d, %s: took %v without Redis", i, step.name, d)
		}
	}
	srv.Start() // empty: it keeps nothing on disk
	// Each replica tries Redis again within RetryEvery; the first to
	// find it takes the new server's burst, the other is then refused.
	deadline := time.Now().Add(time.Second + 100*time.Millisecond)
	var allowed []bool
	for _, l := range []*Limiter{a, b} {
		for {
			ok, _, err := l.decide(t.Context(), "allow", 1, -1)
			if err == nil {
				allowed = append(allowed, ok)
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("decisions were not shared again within a second of Redis's return")
			}
			time.Sleep(10 * time.Millisecond) // real time: a real server came back
		}
	}
	if !allowed[0] || allowed[1] {
		t.Fatalf("after Redis came back: %v, want the burst of one call shared", allowed)
	}
}
