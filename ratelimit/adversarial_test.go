package ratelimit

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"
)

// recovered runs f and returns what it panicked with.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

type panicTransport struct{ v any }

func (p panicTransport) RoundTrip(*http.Request) (*http.Response, error) { panic(p.v) }

// TestTransportPanicGivesTheSlotBack: a Base or a Tokens function that
// panics does not keep the Adaptive slot taken for it; the panic goes on
// unchanged.
func TestTransportPanicGivesTheSlotBack(t *testing.T) {
	boom := errors.New("boom")
	for _, tr := range []*Transport{
		{Base: panicTransport{boom}},
		{Base: &statusTransport{}, Limiter: New(Config{}), Tokens: func(*http.Request) int { panic(boom) }},
	} {
		a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1})
		tr.Adaptive = a
		req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
		if got := recovered(func() { _, _ = tr.RoundTrip(req) }); got != boom {
			t.Fatalf("recovered %v, want %v", got, boom)
		}
		if a.InFlight() != 0 || !a.TryAcquire() {
			t.Fatalf("%d in flight after a panic: the slot was lost", a.InFlight())
		}
	}
}

// clock is a settable clock for the Now fields.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestClocksBefore1970 runs the Limiter and the Adaptive limit on a zero
// time.Time (an injected clock never set) and dates before 1970: they
// limit as they would today.
func TestClocksBefore1970(t *testing.T) {
	for _, start := range []time.Time{{}, time.Date(1969, 12, 31, 23, 59, 30, 0, time.UTC), time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)} {
		c := &clock{t: start}
		l := New(Config{RequestsPerMinute: 60, Now: c.Now})
		allowed := 0
		for range 600 { // a minute, ten tries a second
			if l.Allow(1) {
				allowed++
			}
			c.Add(100 * time.Millisecond)
		}
		if allowed < 55 || allowed > 60 {
			t.Fatalf("%v: %d calls allowed in a minute at 60 a minute", start, allowed)
		}
		h := http.Header{}
		h.Set("x-ratelimit-remaining-requests", "0")
		h.Set("x-ratelimit-reset-requests", "10s")
		l.Observe(h)
		if l.Allow(1) {
			t.Fatalf("%v: a call allowed with no requests left", start)
		}

		a := NewAdaptive(AdaptiveConfig{Initial: 10, Now: c.Now})
		a.TryAcquire()
		a.ReleaseAfter(Success, time.Second)
		a.TryAcquire()
		a.Release(Congested)
		if a.Limit() != 7 || a.InFlight() != 0 {
			t.Fatalf("%v: limit %d, %d in flight after a cut", start, a.Limit(), a.InFlight())
		}
	}
}

// TestClockGoesBack: a clock stepped back does not hold the Adaptive
// limit's cut, its memory of the fastest latency or the Limiter's learned
// pace for as long as it stepped back.
func TestClockGoesBack(t *testing.T) {
	c := &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	a := NewAdaptive(AdaptiveConfig{Initial: 100, Now: c.Now})
	a.TryAcquire()
	a.ReleaseAfter(Success, 100*time.Millisecond) // the fastest
	a.TryAcquire()
	a.Release(Congested) // 100 → 70, and no further cut for a second
	c.Add(-time.Hour)
	c.Add(2 * time.Second)
	a.TryAcquire()
	a.Release(Congested)
	if a.Limit() != 49 {
		t.Fatalf("limit %d, want 49: an hour back, the second's pause after a cut lasted an hour", a.Limit())
	}
	c.Add(fastestWindow * 2)
	a.TryAcquire()
	a.ReleaseAfter(Success, time.Second) // slow next to 100 ms, but 100 ms was an hour ahead and two windows ago
	if a.Limit() < 49 {
		t.Fatalf("limit %d: a latency recorded before the clock went back was still the fastest", a.Limit())
	}

	l := New(Config{RequestsPerMinute: 600, Now: c.Now})
	h := http.Header{}
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "1m")
	l.Observe(h)
	c.Add(-time.Hour)
	c.Add(2 * time.Minute)
	if !l.Allow(1) {
		t.Fatal("an hour back, a pace learned for a minute still held two minutes later")
	}
}
