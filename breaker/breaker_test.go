package breaker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// call makes one allowed attempt with the given outcome, and reports
// whether the breaker let it through.
func call(b *Breaker, o rebound.Outcome) bool {
	p, err := b.Allow()
	if err != nil {
		return false
	}
	b.Done(p, o)
	return true
}

func TestConsecutiveFailuresOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New("gpt-x:summarise", Config{})
		for range 4 {
			call(b, rebound.OutcomeFailure)
		}
		call(b, rebound.OutcomeSuccess) // resets the run
		for range 4 {
			call(b, rebound.OutcomeFailure)
			call(b, rebound.OutcomeIgnored) // a 400 moves nothing
		}
		if b.State() != Closed {
			t.Fatalf("state %v after 4 failures in a row, want closed", b.State())
		}
		call(b, rebound.OutcomeFailure)
		if b.State() != Open {
			t.Fatalf("state %v after 5 failures in a row, want open", b.State())
		}
		_, err := b.Allow()
		var oe *OpenError
		if !errors.Is(err, ErrOpen) || !errors.As(err, &oe) || !oe.Until.Equal(time.Now().Add(30*time.Second)) {
			t.Fatalf("Allow on an open breaker: %v", err)
		}
		if !strings.Contains(err.Error(), `breaker "gpt-x:summarise": open until`) {
			t.Fatalf("message %q", err)
		}
	})
}

func TestFailureRateOpens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New("m", Config{ConsecutiveFailures: -1, MinCalls: 20, FailureRate: 0.5, Window: time.Minute})
		// 9 failures in 18 calls, alternating: never 2 in a row, under MinCalls.
		for range 9 {
			call(b, rebound.OutcomeSuccess)
			call(b, rebound.OutcomeFailure)
		}
		if b.State() != Closed {
			t.Fatal("opened below MinCalls")
		}
		call(b, rebound.OutcomeSuccess)
		call(b, rebound.OutcomeFailure) // 10 of 20
		if b.State() != Open {
			t.Fatalf("state %v at 10 failures in 20 calls, want open", b.State())
		}
	})
}

func TestFailureRateForgetsOldCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New("m", Config{ConsecutiveFailures: -1, MinCalls: 10, FailureRate: 0.5, Window: time.Minute})
		for range 9 {
			call(b, rebound.OutcomeFailure)
		}
		time.Sleep(2 * time.Minute) // virtual: the failures leave the window
		for range 9 {
			call(b, rebound.OutcomeSuccess)
		}
		call(b, rebound.OutcomeFailure)
		if b.State() != Closed {
			t.Fatalf("state %v: failures older than the window still counted", b.State())
		}
	})
}

func TestHalfOpenProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var changes []string
		b := New("m", Config{ConsecutiveFailures: 1, Cooldown: 10 * time.Second, Probes: 1, Successes: 2,
			OnStateChange: func(c Change) { changes = append(changes, fmt.Sprintf("%v→%v (%s)", c.From, c.To, c.Reason)) }})
		call(b, rebound.OutcomeFailure)
		if call(b, rebound.OutcomeSuccess) {
			t.Fatal("an open breaker let a call through")
		}
		time.Sleep(10 * time.Second)
		p, err := b.Allow()
		if err != nil || b.State() != HalfOpen {
			t.Fatalf("after the cooldown: %v, state %v", err, b.State())
		}
		if _, err := b.Allow(); !errors.Is(err, ErrOpen) {
			t.Fatalf("a second probe while one is in flight: %v", err)
		}
		b.Done(p, rebound.OutcomeFailure)
		if b.State() != Open {
			t.Fatalf("state %v after a failed probe, want open", b.State())
		}
		time.Sleep(10 * time.Second)
		call(b, rebound.OutcomeIgnored) // releases its slot, proves nothing
		call(b, rebound.OutcomeSuccess)
		if b.State() != HalfOpen {
			t.Fatalf("state %v after one probe success, want half-open", b.State())
		}
		call(b, rebound.OutcomeSuccess)
		if b.State() != Closed {
			t.Fatalf("state %v after two probe successes, want closed", b.State())
		}
		want := "closed→open (1 failures in a row)|open→half-open (cooldown over)|half-open→open (a probe failed)|" +
			"open→half-open (cooldown over)|half-open→closed (2 probes succeeded)"
		if got := strings.Join(changes, "|"); got != want {
			t.Fatalf("changes\n%s\nwant\n%s", got, want)
		}
	})
}

func TestStalePermitIsIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := New("m", Config{ConsecutiveFailures: 1, Cooldown: time.Second})
		slow, _ := b.Allow() // a long stream, allowed while closed
		call(b, rebound.OutcomeFailure)
		time.Sleep(time.Second)
		call(b, rebound.OutcomeSuccess)
		call(b, rebound.OutcomeSuccess) // closed again, a new generation
		b.Done(slow, rebound.OutcomeFailure)
		if b.State() != Closed {
			t.Fatalf("an outcome from an earlier generation moved the breaker: %v", b.State())
		}
	})
}

// TestConcurrentUse hammers one breaker from many goroutines (run with
// -race) and checks it ends in a state its history allows.
func TestConcurrentUse(t *testing.T) {
	b := New("m", Config{ConsecutiveFailures: 3, Cooldown: time.Millisecond, MinCalls: 5})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				o := rebound.Outcome(r.IntN(3))
				if p, err := b.Allow(); err == nil {
					b.Done(p, o)
				} else if !errors.Is(err, ErrOpen) {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if s := b.State(); s > HalfOpen {
		t.Fatalf("state %v", s)
	}
}

func TestSet(t *testing.T) {
	s := NewSet(Config{ConsecutiveFailures: 1}, 3)
	a := s.Get("gpt-x:summarise")
	if s.Get("gpt-x:summarise") != a || a.Name() != "gpt-x:summarise" {
		t.Fatal("Get made a second breaker for one key")
	}
	call(a, rebound.OutcomeFailure) // a is open
	s.Get("b")
	s.Get("c")
	s.Get("d") // full: evicts the oldest closed one, "b", not the open "gpt-x:summarise"
	if s.Len() != 3 || s.Get("gpt-x:summarise") != a {
		t.Fatalf("len %d; the open breaker was evicted", s.Len())
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { s.Get(fmt.Sprint(i % 7)) })
	}
	wg.Wait()
	if s.Len() > 3 {
		t.Fatalf("len %d above the bound", s.Len())
	}
}

func TestClosedPathAllocatesNothing(t *testing.T) {
	b := New("m", Config{})
	if n := testing.AllocsPerRun(1000, func() { call(b, rebound.OutcomeSuccess) }); n != 0 {
		t.Fatalf("%v allocations on the closed path", n)
	}
}

func TestNotifyReportsEveryChangeAsAnEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen []string
		obs := rebound.ObserverFunc(func(e rebound.Event) {
			s := fmt.Sprintf("%v %s %s", e.Type, e.Target, e.State)
			if e.Err != nil {
				s += " (" + e.Err.Error() + ")"
			}
			seen = append(seen, s)
		})
		b := New("m", Config{ConsecutiveFailures: 1, Cooldown: 10 * time.Second, Successes: 1, OnStateChange: Notify(obs)})
		call(b, rebound.OutcomeFailure)
		time.Sleep(10 * time.Second)
		call(b, rebound.OutcomeSuccess)
		want := "breaker m open (1 failures in a row)|breaker m half-open|breaker m closed"
		if got := strings.Join(seen, "|"); got != want {
			t.Fatalf("events\n%s\nwant\n%s", got, want)
		}
	})
}
