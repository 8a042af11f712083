package reboundredis

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/redis/go-redis/v9"
)

// replicas returns n Breakers named name on one Redis prefix, each on a
// Store of its own, as n replicas of a service would have them.
func replicas(t *testing.T, n int, cfg breaker.Config) []*Breaker {
	t.Helper()
	sc := testConfig(t, redisURL())
	bs := make([]*Breaker, n)
	for i := range bs {
		s, err := New(sc)
		if err != nil {
			t.Fatal(err)
		}
		bs[i] = NewBreaker(s, "gpt-x:summarise", cfg)
	}
	return bs
}

// age moves the times a breaker's shared state holds back by d, so that
// d seems to have passed for it (its cooldown, its probes' leases), and
// the replicas' knowledge of an open breaker with them.
var age = redis.NewScript(`
local opened = redis.call('HGET', KEYS[1], 'opened')
if opened then redis.call('HSET', KEYS[1], 'opened', tonumber(opened) - ARGV[1]) end
local m = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
for i = 1, #m, 2 do redis.call('ZADD', KEYS[3], tonumber(m[i + 1]) - ARGV[1], m[i]) end
`)

func passes(t *testing.T, d time.Duration, bs ...*Breaker) {
	t.Helper()
	if err := age.Run(t.Context(), bs[0].store.client, bs[0].keys, d.Milliseconds()).Err(); err != nil && err != redis.Nil {
		t.Fatal(err)
	}
	for _, b := range bs {
		b.openUntil.Add(-int64(d))
	}
}

// fail makes a failed attempt through b; it reports whether b let it.
func fail(b *Breaker) bool {
	p, err := b.Allow()
	if err != nil {
		return false
	}
	b.Done(p, rebound.OutcomeFailure)
	return true
}

func succeed(t *testing.T, b *Breaker) {
	t.Helper()
	p, err := b.Allow()
	if err != nil {
		t.Fatalf("a call was refused: %v", err)
	}
	b.Done(p, rebound.OutcomeSuccess)
}

// refusal returns b's refusal of a call, failing the test if it lets it.
func refusal(t *testing.T, b *Breaker) *breaker.OpenError {
	t.Helper()
	p, err := b.Allow()
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) {
		b.Done(p, rebound.OutcomeIgnored)
		t.Fatalf("Allow: permit %x, %v; want a refusal", p, err)
	}
	return oe
}

func TestBreakerTripsForAllReplicas(t *testing.T) {
	var mu sync.Mutex
	var changes []breaker.Change
	cfg := breaker.Config{ConsecutiveFailures: 3, FailureRate: -1, Cooldown: time.Minute,
		OnStateChange: func(c breaker.Change) {
			mu.Lock()
			defer mu.Unlock()
			changes = append(changes, c)
		}}
	r := replicas(t, 3, cfg)
	// Failures in a row are the fleet's: two here, a success there resets
	// them, then three more, on three replicas.
	fail(r[0])
	fail(r[1])
	succeed(t, r[2])
	start := time.Now() // before the trip: it opens a minute from a time after this
	for i := range 3 {
		if !fail(r[i]) {
			t.Fatalf("refused after %d failures in a row", i)
		}
	}
	for _, b := range r {
		oe := refusal(t, b)
		// A refusal reckons the cooldown's end from when it was asked, less
		// what Redis said was left: its round trip's time at most earlier.
		earliest := start.Add(time.Minute - time.Since(start) - time.Millisecond)
		if oe.State != breaker.Open || oe.Name != "gpt-x:summarise" || oe.Until.Before(earliest) || oe.Until.After(time.Now().Add(time.Minute)) {
			t.Errorf("refusal %+v: want open for a minute from the trip", oe)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 1 || changes[0].From != breaker.Closed || changes[0].To != breaker.Open || changes[0].Reason != "3 failures in a row" {
		t.Errorf("changes heard: %+v; want one, closed to open by the replica that tripped it", changes)
	}
}

func TestBreakerFailureRate(t *testing.T) {
	var reason string
	cfg := breaker.Config{ConsecutiveFailures: -1, FailureRate: 0.5, MinCalls: 6, Window: time.Minute,
		OnStateChange: func(c breaker.Change) { reason = c.Reason }}
	r := replicas(t, 2, cfg)
	succeed(t, r[0])
	succeed(t, r[1])
	succeed(t, r[0])
	fail(r[1])
	fail(r[0])
	succeed(t, r[1])
	// 2 of 6: closed.
	allowed := fail(r[0]) // 3 of 7
	if !allowed || reason != "" {
		t.Fatalf("opened early: %q", reason)
	}
	fail(r[1]) // 4 of 8
	if reason != "4 of 8 calls failed in 1m0s" {
		t.Errorf("opened for %q", reason)
	}
	refusal(t, r[0])
}

func TestBreakerProbesFleetWide(t *testing.T) {
	cfg := breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Minute, Probes: 2, Successes: 2}
	r := replicas(t, 4, cfg)
	fail(r[0])
	refusal(t, r[3])
	passes(t, time.Minute, r...)

	// 4 replicas × 5 goroutines ask at once: two probes in the fleet.
	var (
		mu      sync.Mutex
		permits []rebound.Permit
		wg      sync.WaitGroup
	)
	for _, b := range r {
		for range 5 {
			wg.Go(func() {
				p, err := b.Allow()
				var oe *breaker.OpenError
				switch {
				case err == nil:
					mu.Lock()
					defer mu.Unlock()
					permits = append(permits, p)
				case !errors.As(err, &oe) || oe.State != breaker.HalfOpen:
					t.Errorf("refused with %v; want half-open", err)
				}
			})
		}
	}
	wg.Wait()
	if len(permits) != 2 {
		t.Fatalf("%d probes allowed in the fleet, want 2", len(permits))
	}
	// A probe's success frees its slot; the second success closes the
	// breaker for all.
	r[1].Done(permits[0], rebound.OutcomeSuccess)
	third, err := r[2].Allow()
	if err != nil {
		t.Fatalf("a freed slot was not given: %v", err)
	}
	refusal(t, r[3])
	r[0].Done(permits[1], rebound.OutcomeSuccess)
	for _, b := range r {
		succeed(t, b)
	}
	// The third probe's report comes after the breaker closed: it moves
	// nothing.
	r[2].Done(third, rebound.OutcomeFailure)
	succeed(t, r[3])

	// A probe's failure opens it again for all.
	fail(r[3])
	passes(t, time.Minute, r...)
	p, err := r[0].Allow()
	if err != nil {
		t.Fatal(err)
	}
	r[0].Done(p, rebound.OutcomeFailure)
	for _, b := range r {
		if oe := refusal(t, b); oe.State != breaker.Open {
			t.Errorf("after a probe failed: %v", oe)
		}
	}
}

func TestBreakerProbeLeaseExpires(t *testing.T) {
	cfg := breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Minute, Probes: 1, Successes: 1, ProbeTimeout: 5 * time.Minute}
	r := replicas(t, 2, cfg)
	fail(r[0])
	passes(t, time.Minute, r...)
	lost, err := r[0].Allow() // its replica dies, say
	if err != nil {
		t.Fatal(err)
	}
	refusal(t, r[1])
	passes(t, 5*time.Minute-time.Second, r...)
	refusal(t, r[1])
	passes(t, time.Second, r...)
	probe, err := r[1].Allow()
	if err != nil {
		t.Fatalf("the lease of a lost probe did not end: %v", err)
	}
	// The lost probe's late report neither closes the breaker nor frees
	// the slot.
	r[0].Done(lost, rebound.OutcomeSuccess)
	if oe := refusal(t, r[0]); oe.State != breaker.HalfOpen {
		t.Errorf("after a late report: %v", oe)
	}
	r[1].Done(probe, rebound.OutcomeSuccess)
	succeed(t, r[0])
}

func TestBreakerStalePermits(t *testing.T) {
	cfg := breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Minute, Probes: 2, Successes: 1}
	r := replicas(t, 2, cfg)
	closedEarlier, err := r[0].Allow()
	if err != nil {
		t.Fatal(err)
	}
	fail(r[1])
	passes(t, time.Minute, r...)
	// Two probes of one half-open spell; one fails, the other has not
	// reported yet.
	earlier, err := r[0].Allow()
	if err != nil {
		t.Fatal(err)
	}
	fail(r[1])
	passes(t, time.Minute, r...)
	current, err := r[1].Allow()
	if err != nil {
		t.Fatal(err)
	}
	// The earlier spell's probe neither closes the breaker nor frees a slot.
	r[0].Done(earlier, rebound.OutcomeSuccess)
	other, err := r[0].Allow()
	if err != nil {
		t.Fatalf("the second slot: %v", err)
	}
	if oe := refusal(t, r[0]); oe.State != breaker.HalfOpen {
		t.Fatalf("a stale probe changed the state: %v", oe)
	}
	r[1].Done(current, rebound.OutcomeSuccess)
	r[0].Done(other, rebound.OutcomeIgnored)
	// A failure allowed while closed, two states ago, does not trip the
	// breaker closed since.
	r[0].Done(closedEarlier, rebound.OutcomeFailure)
	succeed(t, r[1])
}

// While Redis is away, a local breaker decides; when it is back, the
// shared state decides again. (How long a decision waits for Redis:
// TestEveryPartWaitsForAStalledRedisNoLongerThanTimeout.)
func TestBreakerLocalWhileRedisAway(t *testing.T) {
	srv := startRedis(t)
	sc := testConfig(t, srv.URL())
	sc.RetryEvery = 100 * time.Millisecond
	s, err := New(sc)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBreaker(s, "gpt-x", breaker.Config{ConsecutiveFailures: 2, Cooldown: time.Hour})
	p, err := b.Allow()
	if err != nil || p&3 == permitLocal {
		t.Fatalf("with Redis up: %x %v", p, err)
	}
	srv.Stop()
	b.Done(p, rebound.OutcomeFailure) // lost with Redis
	for range 2 {
		p, err := b.Allow()
		if err != nil || p&3 != permitLocal {
			t.Fatalf("with Redis away: %x %v; want a local permit", p, err)
		}
		b.Done(p, rebound.OutcomeFailure)
	}
	refusal(t, b)

	// The restarted Redis holds no state: shared, the breaker is closed.
	srv.Start()
	eventually(t, "decisions shared again after Redis came back", func() bool {
		p, err := b.Allow()
		if err == nil && p&3 != permitLocal {
			b.Done(p, rebound.OutcomeSuccess)
			return true
		}
		return false
	})
}

// A replica that knows the breaker is open refuses without asking Redis.
func TestBreakerKnownOpenAsksNothing(t *testing.T) {
	srv := startRedis(t)
	s, err := New(testConfig(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	b := NewBreaker(s, "gpt-x", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Hour})
	fail(b)
	srv.Stop()
	refusal(t, b)
	if s.down.Load() {
		t.Error("a refusal known beforehand asked Redis")
	}
}

func TestBreakerIgnoresWhatSaysNothing(t *testing.T) {
	r := replicas(t, 1, breaker.Config{ConsecutiveFailures: 1})
	p, err := r[0].Allow()
	if err != nil {
		t.Fatal(err)
	}
	r[0].Done(p, rebound.OutcomeIgnored)
	r[0].Done(p, rebound.Outcome(99))
	succeed(t, r[0])
	if r[0].Name() != "gpt-x:summarise" {
		t.Errorf("Name() = %q", r[0].Name())
	}
}

// An open breaker no replica asks about for longer than its cooldown and
// a probe's lease is still open when asked: the fleet lets through as many
// calls as a local breaker would, its probes, not every call.
func TestBreakerRemembersOpenThroughAQuietSpell(t *testing.T) {
	cfg := breaker.Config{ConsecutiveFailures: 1, Cooldown: 150 * time.Millisecond, ProbeTimeout: 150 * time.Millisecond, Probes: 1, Successes: 1}
	r := replicas(t, 4, cfg)
	local := breaker.New("local", cfg)
	fail(r[0])
	if p, err := local.Allow(); err == nil {
		local.Done(p, rebound.OutcomeFailure)
	}
	refusal(t, r[1])
	time.Sleep(500 * time.Millisecond) // real time: the keys expire by Redis's clock

	localAllowed := 0
	for range 8 {
		if _, err := local.Allow(); err == nil {
			localAllowed++
		}
	}
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for _, b := range r {
		for range 2 {
			wg.Go(func() {
				if _, err := b.Allow(); err == nil {
					allowed.Add(1)
				} else if !errors.Is(err, breaker.ErrOpen) {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	if allowed.Load() != int32(localAllowed) {
		t.Errorf("after a quiet spell, %d of 8 calls in the fleet went through an open breaker; a local breaker lets %d (its probes) through", allowed.Load(), localAllowed)
	}
}

// A success reported after the state expired writes nothing: every key
// expires by itself.
func TestBreakerStateKeyAlwaysExpires(t *testing.T) {
	cfg := breaker.Config{ConsecutiveFailures: 5, Cooldown: 50 * time.Millisecond, ProbeTimeout: 50 * time.Millisecond}
	b := replicas(t, 1, cfg)[0]
	fail(b) // one failure in a row: the state lives 100 ms
	p, err := b.Allow()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(250 * time.Millisecond) // real time: a long call, the state expires meanwhile
	b.Done(p, rebound.OutcomeSuccess)
	ttl, err := b.store.client.PTTL(t.Context(), b.keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl == -1 {
		t.Errorf("the breaker's state key %q exists with no expiry", b.keys[0])
	}
}

// An Allow whose answer was lost while Redis stalled still runs when
// Redis resumes, and may lease the fleet's only probe slot for no one:
// the replica's next round trip releases it.
func TestBreakerReleasesLostProbe(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	// A live Redis answers well within the Timeout, however busy the
	// machine; the stalled one makes the Allow wait it out.
	cfg.Timeout, cfg.RetryEvery = time.Second, 50*time.Millisecond
	bcfg := breaker.Config{ConsecutiveFailures: 1, Cooldown: 100 * time.Millisecond, Probes: 1, Successes: 1}
	var bs []*Breaker
	for range 2 {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, NewBreaker(s, "wedge", bcfg))
	}
	fail(bs[0])
	time.Sleep(150 * time.Millisecond) // real time: the cooldown ends by Redis's clock
	if err := srv.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	p, err := bs[0].Allow() // times out: the local breaker lets it through
	if err := srv.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err != nil || p&3 != permitLocal {
		t.Fatalf("with Redis stalled: %x %v; want a local permit", p, err)
	}
	bs[0].Done(p, rebound.OutcomeSuccess)
	time.Sleep(cfg.RetryEvery) // real time: the store tries Redis again once RetryEvery has passed
	var leases int64
	eventually(t, "Redis, resumed, runs the lost Allow", func() bool {
		leases, err = cfg.Client.ZCard(t.Context(), bs[0].keys[2]).Result()
		return err != nil || leases > 0
	})
	if err != nil || leases != 1 {
		t.Fatalf("the lost Allow left %d leases (%v); want the one it took", leases, err)
	}
	refusal(t, bs[1]) // the other replica cannot know the lease is lost

	probe, err := bs[0].Allow()
	if err != nil || probe&3 != permitProbe {
		t.Fatalf("the next round trip: %x %v; want the probe slot the lost Allow held", probe, err)
	}
	bs[0].Done(probe, rebound.OutcomeSuccess)
	succeed(t, bs[1])
}

// An empty name's keys still share a hash tag, so one cluster slot.
func TestBreakerEmptyNameOneSlot(t *testing.T) {
	b := NewBreaker(testStore(t), "", breaker.Config{})
	named := NewBreaker(b.store, "-", breaker.Config{})
	for i, k := range b.keys {
		open := strings.IndexByte(k, '{')
		end := strings.IndexByte(k[open+1:], '}')
		if open < 0 || end <= 0 || k[open+1:open+1+end] != "-" {
			t.Errorf("key %q: want the hash tag {-}", k)
		}
		if k == named.keys[i] {
			t.Errorf("the empty name and %q share the key %q", named.name, k)
		}
	}
	fail(b)
	succeed(t, b)
}

func TestNewBreakerNilStore(t *testing.T) {
	defer func() {
		if r := recover(); r != "reboundredis: NewBreaker: the Store is nil" {
			t.Errorf("recovered %v", r)
		}
	}()
	NewBreaker(nil, "gpt-x", breaker.Config{})
}

// A closed breaker's Allow and Done (one round trip), alone and from
// parallel goroutines; and the refusal of a breaker known to be open
// (none).
func BenchmarkBreaker(b *testing.B) {
	s := testStore(b)
	run := func(name string, cfg breaker.Config, parallel bool) {
		br := NewBreaker(s, name, cfg)
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			call := func() {
				if p, err := br.Allow(); err == nil {
					br.Done(p, rebound.OutcomeSuccess)
				}
			}
			if !parallel {
				for b.Loop() {
					call()
				}
				return
			}
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					call()
				}
			})
		})
	}
	run("closed", breaker.Config{}, false)
	run("closed-parallel", breaker.Config{}, true)
	run("closed-no-rate", breaker.Config{FailureRate: -1}, false)
	open := NewBreaker(s, "open", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Hour})
	fail(open)
	b.Run("open-known", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			open.Allow()
		}
	})
}
