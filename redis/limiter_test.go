package reboundredis

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/ratelimit"
)

// These tests run against a real Redis, whose clock goes on while they
// run: they read the delays the script gives (reserve) rather than sleep
// through them, and allow each the time that went by meanwhile (near).

// reserve reserves one call of tokens and returns its delay.
func reserve(t *testing.T, l *Limiter, tokens int) time.Duration {
	t.Helper()
	ok, d, err := l.decide(t.Context(), "wait", tokens, -1)
	if err != nil || !ok {
		t.Fatalf("reserving %d tokens: %v %v", tokens, ok, err)
	}
	return d
}

// near checks a delay the script gave against want, the delay due at
// from, an instant before the calls that set the state it follows: the
// server's clock went on since, by no more than the time the test
// measures, however busy the machine. A millisecond more covers the
// rounding of times to microseconds.
func near(t *testing.T, what string, got, want time.Duration, from time.Time) {
	t.Helper()
	passed := time.Since(from)
	if slack := passed + time.Millisecond; got < want-slack || got > want+slack {
		t.Fatalf("%s: %v, want %v give or take the %v since", what, got, want, passed)
	}
}

// sleeps is a clock that notes the sleeps asked of it and sleeps none.
type sleeps struct {
	mu    sync.Mutex // guards asked
	asked []time.Duration
}

func (c *sleeps) Now() time.Time { return time.Now() }

func (c *sleeps) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.asked = append(c.asked, d)
	return nil
}

func (c *sleeps) take() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	asked := c.asked
	c.asked = nil
	return asked
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
	from := time.Now()
	if !l.Allow(1) || l.Allow(1) {
		t.Fatal("the burst is not one call")
	}
	step := paced(6, 1)
	near(t, "the first call after the burst waits", reserve(t, l, 1), step, from)
	near(t, "the second", reserve(t, l, 1), 2*step, from)

	l = NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 600})
	n, start := 0, time.Now()
	for l.Allow(1) {
		n++
	}
	// A busy machine makes the loop slow enough for the pace (one call
	// every 100 ms) to add calls to the burst: no more than the time
	// taken allows.
	if paced := int(time.Since(start) / (100 * time.Millisecond)); n < 10 || n > 10+paced {
		t.Fatalf("a burst of %d at 600 a minute in %v, want a second's worth, 10, and %d more paced", n, time.Since(start), paced)
	}
}

func TestLimiterTokens(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{TokensPerMinute: 600, TokenBurst: 100})
	from := time.Now()
	if !l.Allow(60) || !l.Allow(40) || l.Allow(1) {
		t.Fatal("the burst is not 100 tokens")
	}
	step := paced(600, 100)
	near(t, "50 tokens after the burst", reserve(t, l, 50), 50*step, from)
	// A call larger than the burst is charged the burst.
	near(t, "1000 tokens", reserve(t, l, 1000), 150*step, from)
	if !NewLimiter(testStore(t), "model", ratelimit.Config{}).Allow(1 << 30) {
		t.Fatal("a Limiter with no limits refused a call")
	}
}

// TestLimiterBothLimits: a call held back by its tokens goes when the
// tokens allow, and is counted there by the requests limit too, so that
// calls the tokens held back do not all go at once.
func TestLimiterBothLimits(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 60, TokensPerMinute: 600, TokenBurst: 100})
	from := time.Now()
	if !l.Allow(100) {
		t.Fatal("the first call was refused")
	}
	tok, req := paced(600, 100), paced(60, 1)
	near(t, "100 tokens more", reserve(t, l, 100), 100*tok, from)
	near(t, "then a call of no tokens", reserve(t, l, 0), 100*tok+req, from)
}

// TestLimiterRefusesPastTheDeadline: a slot past the caller's deadline is
// refused at once, without a sleep, and reserves nothing; one within it
// is slept for.
func TestLimiterRefusesPastTheDeadline(t *testing.T) {
	clock := &sleeps{}
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 6, Clock: clock})
	from := time.Now()
	l.Allow(1)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := l.Wait(ctx, 1); !errors.Is(err, ratelimit.ErrDeadline) {
		t.Fatalf("Wait: %v, want ErrDeadline", err)
	}
	if asked := clock.take(); len(asked) != 0 {
		t.Fatalf("the refusal slept %v", asked)
	}
	// The refused call reserved nothing: the next slot is one step away,
	// not two.
	near(t, "the next call", reserve(t, l, 1), paced(6, 1), from)

	// A slot within the deadline is waited for.
	l = NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 600, Clock: clock})
	from = time.Now()
	for l.Allow(1) {
	}
	ctx, cancel = context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := l.Wait(ctx, 1); err != nil {
		t.Fatal(err)
	}
	asked := clock.take()
	if len(asked) != 1 {
		t.Fatalf("a wait for a slot within the deadline slept %v; want once", asked)
	}
	near(t, "the wait", asked[0], paced(600, 10), from)
}

func TestLimiterCorrect(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{TokensPerMinute: 600, TokenBurst: 100})
	from := time.Now()
	l.Allow(100)
	l.Correct(100, 90) // fewer than estimated: nothing given back
	l.Correct(100, 150)
	step := paced(600, 100)
	near(t, "a call after 50 tokens more than estimated", reserve(t, l, 1), 51*step, from)
	l.Correct(0, 1000) // charged a burst at most
	near(t, "a call after a correction beyond the burst", reserve(t, l, 1), 152*step, from)
}

// TestLimiterLearnsForEveryReplica: what one replica learns from the
// provider's headers paces the others.
func TestLimiterLearnsForEveryReplica(t *testing.T) {
	cfg := ratelimit.Config{RequestsPerMinute: 600}
	s := testStore(t)
	a, b := NewLimiter(s, "model", cfg), NewLimiter(replica(t, s), "model", cfg)

	from := time.Now()
	a.Learn(rateHeader("x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "30s"))
	if b.Allow(1) {
		t.Fatal("a call went in another replica with no requests left")
	}
	near(t, "the next call in another replica", reserve(t, b, 1), 30*time.Second, from)
	if a.local.Allow(1) {
		t.Fatal("the local Limiter, for when Redis is away, did not learn")
	}

	// 20 requests left in a minute: the configured burst, then one every 3 s.
	c := NewLimiter(a.store, "other", cfg)
	d := NewLimiter(b.store, "other", cfg)
	from = time.Now()
	c.Learn(rateHeader("x-ratelimit-remaining-requests", "20", "x-ratelimit-reset-requests", "1m"))
	for i := range 10 {
		if !d.Allow(1) {
			t.Fatalf("call %d of the burst refused", i)
		}
	}
	near(t, "after the burst at the learned pace", reserve(t, d, 1), 3*time.Second, from)
	// Plenty left: the configured pace is back, for every replica.
	c.Learn(rateHeader("x-ratelimit-remaining-requests", "590", "x-ratelimit-reset-requests", "1s"))
	from = time.Now()
	first := reserve(t, d, 1)
	near(t, "the step between two calls", reserve(t, d, 1)-first, paced(600, 10), from)

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
	from = time.Now()
	e.Learn(rateHeader("anthropic-ratelimit-tokens-remaining", "0",
		"anthropic-ratelimit-tokens-reset", reset.UTC().Format(time.RFC3339)))
	if f.Allow(1) {
		t.Fatal("a call went with no tokens left")
	}
	near(t, "the next call", reserve(t, f, 1), reset.Sub(from), from)
}

// TestLimiterServerClockGoesBack: a Redis server whose clock is set back
// takes the times kept with it, so calls do not wait for it to catch up.
func TestLimiterServerClockGoesBack(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 6})
	from := time.Now()
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
	near(t, "the next call", reserve(t, l, 1), paced(6, 1), from)
}

func TestLimiterKeyExpires(t *testing.T) {
	l := NewLimiter(testStore(t), "model", ratelimit.Config{RequestsPerMinute: 600})
	l.Allow(1)
	read := time.Now()
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
	if again, _ := l.store.client.PTTL(t.Context(), l.keys[0]).Result(); again > ttl || again < ttl-time.Since(read)-time.Millisecond {
		t.Fatalf("the key's expiry moved from %v to %v, %v later", ttl, again, time.Since(read))
	}
}

// TestLimiterWithoutRedis: when Redis stops answering, every decision is
// made locally, as the in-memory Limiter would; once it answers again,
// decisions are shared again. (How long a decision waits for Redis:
// TestEveryPartWaitsForAStalledRedisNoLongerThanTimeout.)
func TestLimiterWithoutRedis(t *testing.T) {
	srv := startRedis(t)
	store := func() *Store {
		cfg := testConfig(t, srv.URL())
		cfg.RetryEvery = 100 * time.Millisecond
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	cfg := ratelimit.Config{RequestsPerMinute: 6, TokensPerMinute: 6000}
	a := NewLimiter(store(), "model", cfg)
	b := NewLimiter(store(), "model", cfg)
	b.keys = a.keys // two replicas: two Stores, one state
	if !a.Allow(1) || b.Allow(1) {
		t.Fatal("the burst of one call was not shared")
	}
	srv.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
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
		if got := step.do(); got != step.want {
			t.Errorf("step %d, %s: %v without Redis, want %v", i, step.name, got, step.want)
		}
	}
	srv.Start() // empty: it keeps nothing on disk
	// Each replica tries Redis again within RetryEvery; the first to
	// find it takes the new server's burst, the other is then refused.
	var allowed []bool
	for _, l := range []*Limiter{a, b} {
		eventually(t, "decisions shared again after Redis came back", func() bool {
			ok, _, err := l.decide(t.Context(), "allow", 1, -1)
			if err == nil {
				allowed = append(allowed, ok)
			}
			return err == nil
		})
	}
	if !allowed[0] || allowed[1] {
		t.Fatalf("after Redis came back: %v, want the burst of one call shared", allowed)
	}
}
