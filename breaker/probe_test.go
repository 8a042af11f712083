package breaker_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/internal/testclock"
)

// try makes one attempt with outcome o if b allows it, and reports whether
// it did.
func try(b *breaker.Breaker, o rebound.Outcome) bool {
	p, err := b.Allow()
	if err != nil {
		return false
	}
	b.Done(p, o)
	return true
}

// TestPanickingProbeDoesNotWedge: a probe whose function panics counts as
// a failed probe; the breaker opens again and, after the next cooldown,
// healthy calls close it.
func TestPanickingProbeDoesNotWedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("m", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Minute})
		p := rebound.Policy{Breaker: b}
		try(b, rebound.OutcomeFailure)
		time.Sleep(time.Minute)
		got := func() (v any) {
			defer func() { v = recover() }()
			_ = rebound.Run(t.Context(), p, func(context.Context) error { panic("probe panicked") })
			return nil
		}()
		if got != "probe panicked" {
			t.Fatalf("recovered %v", got)
		}
		if b.State() != breaker.Open {
			t.Fatalf("state %v after a panicking probe, want open", b.State())
		}
		time.Sleep(time.Minute)
		for range 2 {
			if err := rebound.Run(t.Context(), p, func(context.Context) error { return nil }); err != nil {
				t.Fatalf("a healthy probe after the cooldown: %v", err)
			}
		}
		if b.State() != breaker.Closed {
			t.Fatalf("state %v after two healthy probes", b.State())
		}
	})
}

// TestStalePermitsLeakNoSlot races many callers through a breaker that
// keeps opening and re-entering half-open (a cooldown of 1 ns, one probe):
// a permit issued under one half-open spell and counted under the next
// used to hold that spell's only slot forever. Afterwards, a healthy
// target must close the breaker at once.
func TestStalePermitsLeakNoSlot(t *testing.T) {
	for round := range 4 {
		b := breaker.New("m", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Nanosecond, Probes: 1, Successes: 1})
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(round), uint64(g)))
				for range 20000 {
					try(b, rebound.Outcome(r.IntN(2)))
				}
			})
		}
		wg.Wait()
		healed := false
		for range 1000 {
			try(b, rebound.OutcomeSuccess)
			if healed = b.State() == breaker.Closed; healed {
				break
			}
		}
		if !healed {
			_, err := b.Allow()
			t.Fatalf("round %d: the target is healthy and the breaker is still %v (%v)", round, b.State(), err)
		}
	}
}

// TestLostProbeIsReclaimed: a probe that never reports back (a stream body
// never closed) holds its slot for DefaultProbeTimeout at most; its late
// report then moves nothing and frees nobody else's slot.
func TestLostProbeIsReclaimed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("m", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Second, Successes: 1})
		try(b, rebound.OutcomeFailure)
		time.Sleep(time.Second)
		lost, err := b.Allow()
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5*time.Minute - time.Second)
		if _, err := b.Allow(); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("a second probe while the first is young: %v", err)
		}
		time.Sleep(time.Second)
		probe, err := b.Allow()
		if err != nil {
			t.Fatalf("the lost probe's slot was not reclaimed after 5 minutes: %v", err)
		}
		b.Done(lost, rebound.OutcomeFailure) // too late: forgotten
		if b.State() != breaker.HalfOpen {
			t.Fatalf("state %v: a reclaimed probe's report moved the breaker", b.State())
		}
		if _, err := b.Allow(); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("a reclaimed probe's report freed the new probe's slot: %v", err)
		}
		b.Done(probe, rebound.OutcomeSuccess)
		if b.State() != breaker.Closed {
			t.Fatalf("state %v after the new probe succeeded", b.State())
		}
	})
}

// TestProbeTimeout: the bound is configurable, and a probe that reports in
// time is not reclaimed.
func TestProbeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("m", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Second, ProbeTimeout: 20 * time.Minute})
		try(b, rebound.OutcomeFailure)
		time.Sleep(time.Second)
		long, _ := b.Allow() // a stream of a quarter of an hour
		time.Sleep(15 * time.Minute)
		if _, err := b.Allow(); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("a second probe 15 minutes into the first: %v", err)
		}
		b.Done(long, rebound.OutcomeSuccess)
		if !try(b, rebound.OutcomeSuccess) || b.State() != breaker.Closed {
			t.Fatalf("state %v after two probe successes", b.State())
		}
	})
}

// TestClocksBefore1970: a zero time.Time (an injected clock never set) and
// dates before 1970 work as any other: the failure rate opens the breaker
// and the cooldown ends on time.
func TestClocksBefore1970(t *testing.T) {
	for _, start := range []time.Time{{}, time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC),
		time.Date(1600, 6, 1, 0, 0, 0, 0, time.UTC)} {
		c := testclock.New(start)
		b := breaker.New("m", breaker.Config{ConsecutiveFailures: -1, MinCalls: 4, FailureRate: 0.5, Cooldown: time.Minute, Clock: c})
		for i := range 4 {
			try(b, rebound.Outcome(i%2))
			c.Add(time.Second)
		}
		if b.State() != breaker.Open {
			t.Fatalf("%v: state %v after 2 failures in 4 calls, want open", start, b.State())
		}
		_, err := b.Allow()
		var oe *breaker.OpenError
		if !errors.As(err, &oe) || !oe.Until.Equal(start.Add(3*time.Second+time.Minute)) {
			t.Fatalf("%v: refusal %v, want open until a minute after the last failure", start, err)
		}
		c.Add(time.Minute)
		if !try(b, rebound.OutcomeSuccess) {
			t.Fatalf("%v: no probe after the cooldown", start)
		}
	}
}

// TestClockGoesBack: a clock stepped back neither panics, nor keeps the
// breaker open for the length of the step, nor hides new failures behind
// the ones recorded at the later time.
func TestClockGoesBack(t *testing.T) {
	c := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	b := breaker.New("m", breaker.Config{ConsecutiveFailures: -1, MinCalls: 4, FailureRate: 0.5, Cooldown: time.Minute, Clock: c})
	// Three failures, one in each of three buckets of the window: too
	// few calls to judge.
	for range 3 {
		try(b, rebound.OutcomeFailure)
		c.Add(6 * time.Second)
	}
	// A year back (the same buckets of the window), four failures: the
	// buckets still hold the later year's counts, which must not swallow
	// these.
	c.Add(-365*24*time.Hour - 18*time.Second)
	for range 4 {
		try(b, rebound.OutcomeFailure)
		c.Add(6 * time.Second)
	}
	if b.State() != breaker.Open {
		t.Fatalf("state %v after 4 failures in 4 calls a year back, want open", b.State())
	}
	c.Add(-24 * time.Hour)
	if try(b, rebound.OutcomeSuccess) {
		t.Fatal("a call went through an open breaker")
	}
	c.Add(time.Minute)
	if !try(b, rebound.OutcomeSuccess) {
		t.Fatal("the clock went a day back: the breaker stayed open past a cooldown from then")
	}
}
