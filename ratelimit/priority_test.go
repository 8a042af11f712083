package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

func TestPriorityFromContext(t *testing.T) {
	ctx := context.Background()
	if p := PriorityFrom(ctx); p != Interactive {
		t.Errorf("unmarked: %v", p)
	}
	if p := PriorityFrom(WithPriority(ctx, Batch)); p != Batch {
		t.Errorf("marked Batch: %v", p)
	}
	if p := PriorityFrom(WithPriority(ctx, Priority(7))); p != Batch {
		t.Errorf("marked 7: %v, want Batch", p)
	}
	if Interactive.String() != "interactive" || Batch.String() != "batch" {
		t.Errorf("names %q %q", Interactive, Batch)
	}
}

// grants records the order in which waiters got their slot.
type grants struct {
	mu    sync.Mutex
	order []string
}

func (g *grants) add(name string) {
	g.mu.Lock()
	g.order = append(g.order, name)
	g.mu.Unlock()
}

func (g *grants) list() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.order)
}

// wait starts a call of priority p waiting for a slot of a, and returns
// once it waits (or has its slot, or its error). A call granted keeps its
// slot; its name goes to g, or "-name" if Acquire failed.
func wait(a *Adaptive, wg *sync.WaitGroup, g *grants, ctx context.Context, p Priority, name string) {
	wg.Go(func() {
		if err := a.Acquire(WithPriority(ctx, p)); err != nil {
			g.add("-" + name)
			return
		}
		g.add(name)
	})
	synctest.Wait()
}

// TestInteractiveBeforeBatch: waiting interactive calls are granted slots
// before batch calls that waited longer; within a class, first in, first
// out.
func TestInteractiveBeforeBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1, MaxPassOver: 100})
		if !a.TryAcquire() {
			t.Fatal("no first slot")
		}
		var wg sync.WaitGroup
		var g grants
		for _, c := range []struct {
			p    Priority
			name string
		}{{Batch, "b1"}, {Batch, "b2"}, {Interactive, "i1"}, {Interactive, "i2"}} {
			wait(a, &wg, &g, t.Context(), c.p, c.name)
		}
		if a.TryAcquire() {
			t.Fatal("TryAcquire took a slot while calls wait")
		}
		for range 4 {
			a.Release(Neutral)
			synctest.Wait()
		}
		wg.Wait()
		if got := g.list(); !slices.Equal(got, []string{"i1", "i2", "b1", "b2"}) {
			t.Errorf("order %v", got)
		}
		if a.InFlight() != 1 {
			t.Errorf("%d in flight, want the last call's slot", a.InFlight())
		}
	})
}

// TestBatchPassedOverAtMostMaxPassOver keeps interactive calls arriving
// faster than slots free, and counts the interactive grants ahead of each
// waiting batch call: exactly MaxPassOver, then the batch call goes.
func TestBatchPassedOverAtMostMaxPassOver(t *testing.T) {
	for _, m := range []int{1, 3, DefaultMaxPassOver} {
		t.Run(fmt.Sprint(m), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := AdaptiveConfig{Initial: 2, Max: 2}
				if m != DefaultMaxPassOver {
					cfg.MaxPassOver = m // the default is the zero value's
				}
				a := NewAdaptive(cfg)
				a.TryAcquire()
				a.TryAcquire()
				var wg sync.WaitGroup
				var g grants
				wait(a, &wg, &g, t.Context(), Batch, "b1")
				wait(a, &wg, &g, t.Context(), Batch, "b2")
				n := 0
				for range 3 * (m + 1) {
					for range 2 { // more interactive calls arrive than slots free
						n++
						wait(a, &wg, &g, t.Context(), Interactive, fmt.Sprint("i", n))
					}
					a.Release(Neutral)
					synctest.Wait()
				}
				// The interactive grants between two batch grants (or
				// before the first) are those ahead of the batch call
				// that was then the oldest.
				got, ahead := g.list(), 0
				for _, name := range got {
					if name[0] == 'i' {
						ahead++
						continue
					}
					if ahead != m {
						t.Errorf("%d interactive grants ahead of %s, want %d: %v", ahead, name, m, got)
					}
					ahead = 0
				}
				if !slices.Contains(got, "b1") || !slices.Contains(got, "b2") {
					t.Fatalf("a batch call never went: %v", got)
				}
				for range waitingAll(a) + a.InFlight() {
					a.Release(Neutral)
					synctest.Wait()
				}
				wg.Wait()
			})
		})
	}
}

// TestCancelWhileWaiting cancels a waiting call of each class: each gets
// its context's error, the counts of waiting and in-flight calls stay
// right, the others go in their turn, and a cancelled batch call does not
// restart the pass-over count of the batch call behind it.
func TestCancelWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1, MaxPassOver: 2})
		a.TryAcquire()
		var wg sync.WaitGroup
		var g grants
		bctx, cancelB := context.WithCancel(t.Context())
		ictx, cancelI := context.WithCancel(t.Context())
		wait(a, &wg, &g, bctx, Batch, "b1")
		wait(a, &wg, &g, t.Context(), Batch, "b2")
		wait(a, &wg, &g, ictx, Interactive, "i1")
		for _, name := range []string{"i2", "i3", "i4"} {
			wait(a, &wg, &g, t.Context(), Interactive, name)
		}
		if waitingOf(a, Interactive) != 4 || waitingOf(a, Batch) != 2 {
			t.Fatalf("waiting %d interactive, %d batch", waitingOf(a, Interactive), waitingOf(a, Batch))
		}
		cancelI()
		synctest.Wait()
		a.Release(Neutral) // i2: the batch class is passed over once
		synctest.Wait()
		cancelB()
		synctest.Wait()
		if waitingOf(a, Interactive) != 2 || waitingOf(a, Batch) != 1 || a.InFlight() != 1 {
			t.Fatalf("after cancelling: waiting %d interactive, %d batch, %d in flight",
				waitingOf(a, Interactive), waitingOf(a, Batch), a.InFlight())
		}
		for range 3 {
			a.Release(Neutral)
			synctest.Wait()
		}
		wg.Wait()
		// b2 waited through i2's grant: one more interactive grant, then b2.
		if got := g.list(); !slices.Equal(got, []string{"-i1", "i2", "-b1", "i3", "b2", "i4"}) {
			t.Errorf("order %v", got)
		}
		if a.InFlight() != 1 || waitingAll(a) != 0 {
			t.Errorf("%d in flight, %d waiting", a.InFlight(), waitingAll(a))
		}
	})
}

// TestGrantRacingCancellation grants a slot to a waiting call just as its
// context ends. Woken by its context, with the slot already its own, the
// call returns its context's error and hands the slot on to the next call
// in turn; woken by the grant, it keeps the slot, whatever its context
// does next. Either way no slot is lost or doubled.
func TestGrantRacingCancellation(t *testing.T) {
	for _, contextFirst := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1})
			a.TryAcquire()
			var wg sync.WaitGroup
			var g grants
			ctx, cancel := context.WithCancel(t.Context())
			wait(a, &wg, &g, ctx, Batch, "racer")
			wait(a, &wg, &g, t.Context(), Batch, "next")
			want := []string{"racer", "next"}
			if contextFirst {
				// With a.mu held, the racer wakes for its context and
				// waits for the lock while the slot is released to it
				// (what Release does under the lock).
				a.mu.Lock()
				cancel()
				a.inFlight--
				a.grant()
				a.mu.Unlock()
				want = []string{"-racer", "next"}
			} else {
				a.Release(Neutral)
				synctest.Wait()
				cancel()
				a.Release(Neutral) // the racer's slot, to the next call
			}
			wg.Wait()
			if got := g.list(); !slices.Equal(got, want) {
				t.Fatalf("context first %v: %v, want %v", contextFirst, got, want)
			}
			if a.InFlight() != 1 || waitingAll(a) != 0 {
				t.Fatalf("context first %v: %d in flight, %d waiting; want the next call's slot alone", contextFirst, a.InFlight(), waitingAll(a))
			}
		})
	}
}

// TestQueueSizePerPriority: a full batch queue refuses batch calls, not
// interactive ones.
func TestQueueSizePerPriority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1, QueueSize: 2})
		a.TryAcquire()
		ctx, cancel := context.WithCancel(t.Context())
		var wg sync.WaitGroup
		var g grants
		wait(a, &wg, &g, ctx, Batch, "b1")
		wait(a, &wg, &g, ctx, Batch, "b2")
		if err := a.Acquire(WithPriority(ctx, Batch)); !errors.Is(err, ErrQueueFull) {
			t.Errorf("third batch call: %v, want ErrQueueFull", err)
		}
		wait(a, &wg, &g, ctx, Interactive, "i1")
		wait(a, &wg, &g, ctx, Interactive, "i2")
		if err := a.Acquire(ctx); !errors.Is(err, ErrQueueFull) {
			t.Errorf("third interactive call: %v, want ErrQueueFull", err)
		}
		cancel()
		wg.Wait()
		if got := g.list(); len(got) != 4 || waitingAll(a) != 0 || a.InFlight() != 1 {
			t.Errorf("%v, %d waiting, %d in flight", got, waitingAll(a), a.InFlight())
		}
	})
}

// TestTransportTakesThePriorityFromTheRequest: a batch request and an
// interactive request wait for the one slot; the interactive one, though
// later, is sent first.
func TestTransportTakesThePriorityFromTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1})
		a.TryAcquire()
		var g grants
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			g.add(req.URL.Path)
			return nil, errors.New("not sent further")
		})
		tr := &Transport{Base: base, Adaptive: a}
		var wg sync.WaitGroup
		for _, c := range []struct {
			p    Priority
			path string
		}{{Batch, "/batch"}, {Interactive, "/interactive"}} {
			req, _ := http.NewRequestWithContext(WithPriority(t.Context(), c.p), http.MethodGet, "http://provider.test"+c.path, nil)
			wg.Go(func() { tr.RoundTrip(req) })
			synctest.Wait()
		}
		a.Release(Neutral)
		wg.Wait()
		if got := g.list(); !slices.Equal(got, []string{"/interactive", "/batch"}) {
			t.Errorf("sent %v", got)
		}
	})
}

// waitingOf returns how many calls of class p wait for a slot of a.
func waitingOf(a *Adaptive, p Priority) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.waiting.LenOf(int(p))
}

// waitingAll returns how many calls wait for a slot of a.
func waitingAll(a *Adaptive) int { return waitingOf(a, Interactive) + waitingOf(a, Batch) }

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
