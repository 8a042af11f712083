package rebound_test

import (
	"context"
	"iter"
	"runtime"
	"sync"
	"testing"

	"github.com/rebound-go/rebound"
)

// ledger is a Breaker that allows everything, gives each permit a number
// and notes how each one ended, so that a test can see that none is left
// outstanding.
type ledger struct {
	mu       sync.Mutex // guards the fields below
	next     rebound.Permit
	open     map[rebound.Permit]bool
	outcomes []rebound.Outcome
}

func (l *ledger) Allow() (rebound.Permit, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[rebound.Permit]bool{}
	}
	l.next++
	l.open[l.next] = true
	return l.next, nil
}

func (l *ledger) Done(p rebound.Permit, o rebound.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.open[p] {
		panic("Done called twice, or with a permit never issued")
	}
	delete(l.open, p)
	l.outcomes = append(l.outcomes, o)
}

// check fails t unless every permit was handed back and the outcomes were
// want.
func (l *ledger) check(t *testing.T, want ...rebound.Outcome) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.open) != 0 {
		t.Errorf("%d permits never handed back", len(l.open))
	}
	if len(l.outcomes) != len(want) {
		t.Fatalf("outcomes %v, want %v", l.outcomes, want)
	}
	for i := range want {
		if l.outcomes[i] != want[i] {
			t.Fatalf("outcomes %v, want %v", l.outcomes, want)
		}
	}
}

// boom is what the tests panic with: a pointer, so that the caller's
// recover can be checked to see this very value.
type boom struct{ where string }

// recovered runs f and returns what it panicked with.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

const (
	success = rebound.OutcomeSuccess
	failure = rebound.OutcomeFailure
	ignored = rebound.OutcomeIgnored
)

var errDown = &rebound.HTTPError{StatusCode: 503}

// TestPanicInAnAttemptIsAFailure: whatever panics while an attempt holds a
// breaker's permit (the function itself, on any attempt, with or without
// an attempt timeout; the classifier; an observer), the permit is handed
// back as a failure and the caller's recover sees the original value.
func TestPanicInAnAttemptIsAFailure(t *testing.T) {
	cases := []struct {
		name string
		run  func(p rebound.Policy, b *boom)
		want []rebound.Outcome
	}{
		{"first attempt", func(p rebound.Policy, b *boom) {
			_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) { panic(b) })
		}, []rebound.Outcome{failure}},
		{"Run", func(p rebound.Policy, b *boom) {
			_ = rebound.Run(context.Background(), p, func(context.Context) error { panic(b) })
		}, []rebound.Outcome{failure}},
		{"third attempt", func(p rebound.Policy, b *boom) {
			n := 0
			_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) {
				if n++; n == 3 {
					panic(b)
				}
				return 0, errDown
			})
		}, []rebound.Outcome{failure, failure, failure}},
		{"attempt timeout", func(p rebound.Policy, b *boom) {
			p.AttemptTimeout = 1 << 40
			_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) { panic(b) })
		}, []rebound.Outcome{failure}},
		{"classifier", func(p rebound.Policy, b *boom) {
			p.Classifier = func(error) rebound.Verdict { panic(b) }
			_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errDown })
		}, []rebound.Outcome{failure}},
		{"observer", func(p rebound.Policy, b *boom) {
			p.Observer = rebound.ObserverFunc(func(e rebound.Event) {
				if e.Type == rebound.EventAttempt && e.Attempt == 2 {
					panic(b)
				}
			})
			_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errDown })
		}, []rebound.Outcome{failure, failure}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &ledger{}
			b := &boom{c.name}
			p := rebound.Policy{MaxAttempts: 5, BaseDelay: rebound.NoDelay, Breaker: l, Budget: &rebound.RetryBudget{}}
			if got := recovered(func() { c.run(p, b) }); got != b {
				t.Fatalf("the caller recovered %v, want the attempt's own %v", got, b)
			}
			l.check(t, c.want...)
		})
	}
}

// TestPanicWithoutABreaker: with nothing to hand back, a panic passes
// through untouched.
func TestPanicWithoutABreaker(t *testing.T) {
	b := &boom{"no breaker"}
	got := recovered(func() {
		_, _ = rebound.Do(context.Background(), rebound.Policy{}, func(context.Context) (int, error) { panic(b) })
	})
	if got != b {
		t.Fatalf("recovered %v, want %v", got, b)
	}
}

// TestGoexitInAnAttemptHandsThePermitBack: runtime.Goexit (t.FailNow in
// a test's function, say) ends an attempt without a return either.
func TestGoexitInAnAttemptHandsThePermitBack(t *testing.T) {
	l := &ledger{}
	var wg sync.WaitGroup
	wg.Go(func() {
		_, _ = rebound.Do(context.Background(), rebound.Policy{Breaker: l}, func(context.Context) (int, error) {
			runtime.Goexit()
			return 0, nil
		})
	})
	wg.Wait()
	l.check(t, failure)
}

// TestPanicInAStream: a panic in open, or in the attempt's stream before
// or after its first event, hands the permit back as a failure; a panic in
// the caller's own loop body says nothing about the provider and hands it
// back as ignored. Either way the caller recovers the original value.
func TestPanicInAStream(t *testing.T) {
	events := func(b *boom, panicAfter int) iter.Seq2[string, error] {
		return func(yield func(string, error) bool) {
			for i := 0; ; i++ {
				if i == panicAfter {
					panic(b)
				}
				if !yield("e", nil) {
					return
				}
			}
		}
	}
	cases := []struct {
		name string
		open func(b *boom, n *int) func(context.Context) iter.Seq2[string, error]
		body func(b *boom, e string)
		want []rebound.Outcome
	}{
		{"in open", func(b *boom, _ *int) func(context.Context) iter.Seq2[string, error] {
			return func(context.Context) iter.Seq2[string, error] { panic(b) }
		}, nil, []rebound.Outcome{failure}},
		{"before the first event", func(b *boom, _ *int) func(context.Context) iter.Seq2[string, error] {
			return func(context.Context) iter.Seq2[string, error] { return events(b, 0) }
		}, nil, []rebound.Outcome{failure}},
		{"after events", func(b *boom, _ *int) func(context.Context) iter.Seq2[string, error] {
			return func(context.Context) iter.Seq2[string, error] { return events(b, 3) }
		}, nil, []rebound.Outcome{failure}},
		{"on the second attempt", func(b *boom, n *int) func(context.Context) iter.Seq2[string, error] {
			return func(context.Context) iter.Seq2[string, error] {
				if *n++; *n == 1 {
					return func(yield func(string, error) bool) { yield("", errDown) }
				}
				return events(b, 0)
			}
		}, nil, []rebound.Outcome{failure, failure}},
		{"in the caller's loop", func(b *boom, _ *int) func(context.Context) iter.Seq2[string, error] {
			return func(context.Context) iter.Seq2[string, error] { return events(nil, 100) }
		}, func(b *boom, e string) { panic(b) }, []rebound.Outcome{ignored}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &ledger{}
			b := &boom{c.name}
			n := 0
			p := rebound.Policy{BaseDelay: rebound.NoDelay, Breaker: l}
			got := recovered(func() {
				for e, err := range rebound.Stream(context.Background(), p, c.open(b, &n), nil) {
					if err == nil && c.body != nil {
						c.body(b, e)
					}
				}
			})
			if got != b {
				t.Fatalf("the caller recovered %v, want the stream's own %v", got, b)
			}
			l.check(t, c.want...)
		})
	}
}

// TestNoPanicHandsBackTwice: the ordinary paths hand each permit back
// exactly once (the ledger panics on a second Done).
func TestNoPanicHandsBackTwice(t *testing.T) {
	l := &ledger{}
	p := rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay, Breaker: l}
	_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) { return 1, nil })
	_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) { return 0, errDown })
	_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) {
		return 0, &rebound.HTTPError{StatusCode: 400}
	})
	for range rebound.Stream(context.Background(), p, func(context.Context) iter.Seq2[string, error] {
		return func(yield func(string, error) bool) { _ = yield("a", nil) && yield("b", nil) }
	}, nil) {
		break
	}
	l.check(t, success, failure, failure, failure, ignored, success)
}
