package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/testclock"
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

// TestClocksBefore1970 runs the Limiter and the Adaptive limit on a zero
// time.Time (an injected clock never set) and dates before 1970: they
// limit as they would today.
func TestClocksBefore1970(t *testing.T) {
	for _, start := range []time.Time{{}, time.Date(1969, 12, 31, 23, 59, 30, 0, time.UTC), time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)} {
		c := testclock.New(start)
		l := New(Config{RequestsPerMinute: 60, Clock: c})
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
		l.Learn(h)
		if l.Allow(1) {
			t.Fatalf("%v: a call allowed with no requests left", start)
		}

		a := NewAdaptive(AdaptiveConfig{Initial: 10, Clock: c})
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
	c := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	a := NewAdaptive(AdaptiveConfig{Initial: 100, Clock: c})
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

	l := New(Config{RequestsPerMinute: 600, Clock: c})
	h := http.Header{}
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "1m")
	l.Learn(h)
	c.Add(-time.Hour)
	c.Add(2 * time.Minute)
	if !l.Allow(1) {
		t.Fatal("an hour back, a pace learned for a minute still held two minutes later")
	}
}

// hostile is a provider that answers at random (seeded): successes,
// 429s, 503s, connection errors, panics, and answers slow enough to meet
// the caller's deadline. It notes how many requests it holds at once and
// when each was sent.
type hostile struct {
	mu      sync.Mutex // guards the fields below
	r       *rand.Rand
	holding int
	most    int
	sent    []time.Time
}

type hostilePanic struct{}

func (h *hostile) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	h.holding++
	h.most = max(h.most, h.holding)
	h.sent = append(h.sent, time.Now())
	kind, wait := h.r.IntN(7), time.Duration(h.r.IntN(2000))*time.Millisecond
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		h.holding--
		h.mu.Unlock()
	}()
	status := http.StatusOK
	switch kind {
	case 0:
		status = http.StatusTooManyRequests
	case 1:
		status = http.StatusServiceUnavailable
	case 2:
		return nil, errors.New("connection reset by peer")
	case 3:
		panic(hostilePanic{})
	case 4:
		select {
		case <-time.After(wait):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

// TestAdversarial sends many concurrent requests through a Transport with
// both limits to a hostile provider, with contexts cancelled before, during
// and after their wait, and bodies read to the end or only closed; then
// checks that the limits held and nothing was lost: no slot is still
// taken, nobody is still queued, and a healthy provider brings the
// Adaptive limit back up.
func TestAdversarial(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const perMinute, most = 600, 16
		h := &hostile{r: rand.New(rand.NewPCG(7, 7))}
		a := NewAdaptive(AdaptiveConfig{Initial: 8, Max: most, QueueSize: 64})
		l := New(Config{RequestsPerMinute: perMinute})
		tr := &Transport{Base: h, Limiter: l, Adaptive: a}
		var panics atomic.Int64
		var wg sync.WaitGroup
		for g := range 100 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(8, uint64(g)))
				for range 30 {
					time.Sleep(time.Duration(r.IntN(500)) * time.Millisecond)
					if hostileRequest(t, r, tr) {
						panics.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if panics.Load() == 0 {
			t.Fatal("the provider never panicked: the test tests nothing")
		}
		if a.InFlight() != 0 {
			t.Fatalf("%d slots still taken", a.InFlight())
		}
		if !a.TryAcquire() {
			t.Fatal("a slot is refused with nothing in flight: the queue is not empty")
		}
		a.Release(Neutral)
		h.mu.Lock()
		sent, held := h.sent, h.most
		h.mu.Unlock()
		if held > most {
			t.Fatalf("the provider held %d requests at once, over the Adaptive maximum of %d", held, most)
		}
		for i := range sent {
			j := i
			for j < len(sent) && sent[j].Sub(sent[i]) < time.Minute {
				j++
			}
			if j-i > perMinute {
				t.Fatalf("%d requests in the minute from %v, over %d", j-i, sent[i], perMinute)
			}
		}
		t.Logf("%d requests sent of 3000, %d panics, limit %d at the end", len(sent), panics.Load(), a.Limit())

		healthy := &Transport{Base: &statusTransport{}, Adaptive: a}
		healthy.Base.(*statusTransport).status.Store(200)
		for range 200 {
			req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
			resp, err := healthy.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if a.Limit() < 8 || a.InFlight() != 0 {
			t.Fatalf("limit %d, %d in flight after 200 healthy requests", a.Limit(), a.InFlight())
		}
	})
}

// hostileRequest makes one request through tr with a context drawn from
// r, and reports whether the provider panicked.
func hostileRequest(t *testing.T, r *rand.Rand, tr *Transport) (panicked bool) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	switch r.IntN(5) {
	case 0:
		cancel()
	case 1:
		time.AfterFunc(time.Duration(r.IntN(1000))*time.Millisecond, cancel)
	case 2:
		ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(3000))*time.Millisecond)
		defer cancel()
	}
	defer func() {
		switch v := recover().(type) {
		case nil:
		case hostilePanic:
			panicked = true
		default:
			t.Errorf("a panic not the provider's: %v", v)
		}
	}()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/", strings.NewReader(fmt.Sprint(r.Int())))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return false
	}
	if r.IntN(2) == 0 {
		_, _ = io.Copy(io.Discard, resp.Body) // read to the end: releases the slot
	}
	resp.Body.Close()
	return false
}

// TestWaitSleepsByItsClock: a Limiter given a Clock waits by it, as it
// paces by it; the real clock, even a bubble's, does not move.
func TestWaitSleepsByItsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		c := testclock.New(start)
		l := New(Config{RequestsPerMinute: 60, Clock: c})
		if !l.Allow(1) {
			t.Fatal("the first call of a minute refused")
		}
		real := time.Now()
		if err := l.Wait(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		if waited := c.Now().Sub(start); waited < time.Second || waited > 2*time.Second {
			t.Errorf("the limiter's clock moved %v, want about a second", waited)
		}
		if d := time.Since(real); d != 0 {
			t.Errorf("Wait slept %v of real time", d)
		}
	})
}
