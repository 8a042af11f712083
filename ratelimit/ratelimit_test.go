package ratelimit

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/time/rate"
)

// TestNeverExceedsTheLimits: 8 callers waiting as fast as they may for 10
// virtual minutes; no 60 s window sees more than RPM calls or TPM tokens.
func TestNeverExceedsTheLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const rpm, tpm, tokens = 120.0, 60000.0, 700
		l := New(Config{RequestsPerMinute: rpm, TokensPerMinute: tpm})
		start := time.Now()
		var mu sync.Mutex
		var at []time.Duration
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for time.Since(start) < 10*time.Minute {
					if err := l.Wait(t.Context(), tokens); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					at = append(at, time.Since(start))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		maxCalls := min(rpm, tpm/tokens) // the tighter of the two limits
		for i := range at {
			n := 0
			for _, a := range at[i:] {
				if a-at[i] < time.Minute {
					n++
				}
			}
			if float64(n) > maxCalls {
				t.Fatalf("%d calls in the minute from %v; limit %.0f", n, at[i], maxCalls)
			}
		}
		if perMin := float64(len(at)) / 10; perMin < maxCalls*0.8 {
			t.Fatalf("%.1f calls a minute on average: far below the limit %.0f", perMin, maxCalls)
		}
		t.Logf("%d calls in 10 minutes, limit %.0f a minute", len(at), maxCalls)
	})
}

func TestHonoursAResetHeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{RequestsPerMinute: 600})
		h := http.Header{}
		h.Set("X-Ratelimit-Remaining-Requests", "0")
		h.Set("X-Ratelimit-Reset-Requests", "20s")
		l.Learn(h)
		start := time.Now()
		if err := l.Wait(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < 19*time.Second || waited > 21*time.Second {
			t.Fatalf("waited %v, want the 20 s until the reset", waited)
		}
		// After the reset, the configured pace is back: a second's worth at once.
		time.Sleep(time.Second)
		for i := range 10 {
			if !l.Allow(1) {
				t.Fatalf("call %d refused after the reset", i)
			}
		}
	})
}

func TestPacesWhatIsLeftUntilTheReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{})
		h := http.Header{}
		h.Set("Anthropic-Ratelimit-Requests-Remaining", "10")
		h.Set("Anthropic-Ratelimit-Requests-Reset", time.Now().Add(10*time.Second).UTC().Format(time.RFC3339))
		l.Learn(h)
		start := time.Now()
		for range 20 {
			if err := l.Wait(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
		}
		// 10 at once (the burst of what is left), then 1 a second until the reset.
		if took := time.Since(start); took < 9*time.Second || took > 11*time.Second {
			t.Fatalf("20 calls took %v", took)
		}
	})
}

func TestDropsACallThatWouldMissItsDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{RequestsPerMinute: 6}) // a burst of 1, then one every 12 s (5 a minute after it)
		l.Allow(1)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := l.Wait(ctx, 1); !errors.Is(err, ErrDeadline) || time.Since(start) != 0 {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
		// The dropped call took nothing: the next slot is still 12 s away, not 24.
		if err := l.Wait(t.Context(), 1); err != nil || time.Since(start) != 12*time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
}

// TestTokenBurst: a smaller token burst leaves the pace more of the limit,
// and still no 60 s window sees more than the limit.
func TestTokenBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const tpm = 60000
		for _, c := range []struct{ burst, want int }{
			{0, tpm / 6},   // ten seconds' worth
			{1000, 1000},   // as set
			{tpm, tpm / 2}, // cut to half the limit
		} {
			l := New(Config{TokensPerMinute: tpm, TokenBurst: c.burst})
			if !l.Allow(c.want) || l.Allow(1) {
				t.Fatalf("TokenBurst %d: the burst is not %d tokens", c.burst, c.want)
			}
			// Two minutes of calls of 100 tokens, from a full burst.
			start := time.Now()
			got := c.want
			var at []time.Duration
			for {
				if err := l.Wait(t.Context(), 100); err != nil {
					t.Fatal(err)
				}
				if time.Since(start) >= 2*time.Minute {
					break
				}
				got += 100
				at = append(at, time.Since(start))
			}
			if want := 2*tpm - c.want; got < want-100 || got > want {
				t.Fatalf("TokenBurst %d: %d tokens in two minutes, want 2·limit − burst = %d", c.burst, got, want)
			}
			// The window from the start holds the burst and a minute of pace.
			n := c.want
			for _, a := range at {
				if a < time.Minute {
					n += 100
				}
			}
			if n > tpm {
				t.Fatalf("TokenBurst %d: %d tokens in the first minute", c.burst, n)
			}
		}
	})
}

// TestLearnedPaceNeverFaster: headers saying plenty is left do not speed
// the Limiter beyond its configured pace, which leaves room for the burst.
func TestLearnedPaceNeverFaster(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(Config{RequestsPerMinute: 600})
		h := http.Header{}
		h.Set("X-Ratelimit-Remaining-Requests", "100000")
		h.Set("X-Ratelimit-Reset-Requests", "1m")
		start := time.Now()
		n := 0
		for time.Since(start) < time.Minute {
			l.Learn(h)
			if err := l.Wait(t.Context(), 1); err != nil {
				t.Fatal(err)
			}
			if time.Since(start) < time.Minute {
				n++
			}
		}
		if n > 600 {
			t.Fatalf("%d calls in the first minute at 600 a minute", n)
		}
	})
}

func TestAdaptiveCutsAndRecovers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdaptive(AdaptiveConfig{Initial: 20})
		if !a.TryAcquire() {
			t.Fatal("no slot")
		}
		a.Release(Congested) // a 429
		if got := a.Limit(); got != 14 {
			t.Fatalf("limit %d after a 429, want 14", got)
		}
		a.TryAcquire()
		a.Release(Congested) // the same burst: no second cut
		if got := a.Limit(); got != 14 {
			t.Fatalf("limit %d after a second 429 in the same second", got)
		}
		for range 200 {
			a.TryAcquire()
			a.Release(Success)
		}
		if got := a.Limit(); got < 20 {
			t.Fatalf("limit %d after 200 successes: it did not recover", got)
		}
	})
}

func TestAdaptiveQueueDropsExpiredCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1})
		if err := a.Acquire(t.Context()); err != nil {
			t.Fatal(err)
		}
		var order []int
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range 3 {
			ctx := t.Context()
			var cancel context.CancelFunc = func() {}
			if i == 1 {
				ctx, cancel = context.WithTimeout(ctx, time.Second) // leaves before its turn
			}
			wg.Go(func() {
				defer cancel()
				if err := a.Acquire(ctx); err != nil {
					mu.Lock()
					order = append(order, -i)
					mu.Unlock()
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				time.Sleep(time.Second)
				a.Release(Success)
			})
			synctest.Wait() // queue them in order
		}
		time.Sleep(2 * time.Second)
		a.Release(Success) // the first slot
		wg.Wait()
		if len(order) != 3 || order[0] != -1 || order[1] != 0 || order[2] != 2 || a.InFlight() != 0 {
			t.Fatalf("order %v (want the expired caller dropped, the others first in first out), in flight %d", order, a.InFlight())
		}
	})
}

// BenchmarkAllow compares the Limiter's Allow with golang.org/x/time/rate's,
// which it is built on, in one run.
func BenchmarkAllow(b *testing.B) {
	b.Run("rebound", func(b *testing.B) {
		l := New(Config{RequestsPerMinute: 1e12})
		b.ReportAllocs()
		for b.Loop() {
			l.Allow(1)
		}
	})
	b.Run("x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(rate.Limit(1e12/60), 1e10)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
}
