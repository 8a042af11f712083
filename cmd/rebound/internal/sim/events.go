package sim

import (
	"context"
	"time"

	"github.com/rebound-go/rebound/internal/queue"
	"github.com/rebound-go/rebound/ratelimit"
)

// scheduler runs a discrete-event simulation: events in order of their
// virtual time and, at one time, of their scheduling. Its procs (see
// proc.go) are the simulated callers that run rebound's own code.
type scheduler struct {
	clock  *Clock // the simulation's now, moved event by event
	events eventQueue
	seq    int

	procs   []*proc // every proc made, in the order they were
	free    []*proc // the procs with no call to run
	current *proc   // the proc running, nil while an event runs
}

type event struct {
	at  int64 // nanoseconds since 1970, in UTC (a simulation runs in this century)
	seq int
	fn  func()
}

// eventQueue is a min-heap of events by (at, seq).
type eventQueue []event

func (q eventQueue) less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}

func (q *eventQueue) push(e event) {
	*q = append(*q, e)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if !h.less(i, parent) {
			break
		}
		h[i], h[parent] = h[parent], h[i]
		i = parent
	}
}

func (q *eventQueue) pop() event {
	h := *q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h[last] = event{} // the queue keeps no closure it is done with
	h = h[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h.less(l, small) {
			small = l
		}
		if r < len(h) && h.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
	*q = h
	return top
}

// at schedules fn at t.
func (s *scheduler) at(t time.Time, fn func()) {
	s.seq++
	s.events.push(event{at: t.UnixNano(), seq: s.seq, fn: fn})
}

// runUntil runs the events due up to end, telling minute (if set) of each
// simulated minute done since start. It stops with ctx's cause when ctx is
// done, checked every few thousand events.
func (s *scheduler) runUntil(ctx context.Context, start, end time.Time, minute func(done time.Duration)) error {
	nextMinute := start.Add(time.Minute)
	last := int64(end.Sub(time.Unix(0, 0))) // saturates, for an end past any event
	for n := 0; len(s.events) > 0; n++ {
		if n%4096 == 0 && ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if s.events[0].at > last {
			break
		}
		e := s.events.pop()
		at := time.Unix(0, e.at).UTC()
		if !at.Before(nextMinute) {
			if minute != nil {
				minute(at.Sub(start).Truncate(time.Minute))
			}
			nextMinute = start.Add(at.Sub(start).Truncate(time.Minute) + time.Minute)
		}
		s.clock.AdvanceTo(at) // events come in order: never back
		e.fn()
	}
	return nil
}

// gate is the client side of an Adaptive limit in a simulation, where
// calls cannot block in Acquire: a call that finds no free slot waits in
// the limit's own queue discipline (internal/queue, as Adaptive's waiters
// do), and each slot released goes to the call whose turn it is.
type gate[T any] struct {
	adaptive *ratelimit.Adaptive
	waiting  *queue.Queue[T]
}

// newGate returns a gate of a, whose Batch calls are passed over at most
// maxPassOver times (as a's AdaptiveConfig.MaxPassOver says).
func newGate[T any](a *ratelimit.Adaptive, maxPassOver int) *gate[T] {
	return &gate[T]{adaptive: a, waiting: queue.New[T](int(ratelimit.Batch)+1, maxPassOver)}
}

// enter takes a slot for c and reports true, or queues c as p and reports
// false, as Adaptive.Acquire does.
func (g *gate[T]) enter(p ratelimit.Priority, c T) bool {
	if g.waiting.Len() == 0 && g.adaptive.TryAcquire() {
		return true
	}
	g.waiting.Push(int(p), c)
	return false
}

// release gives a slot back, with the signal and latency ReleaseAfter
// takes, and hands the free slots to the waiting calls in turn: send
// sends one. A call stale (if set) says is too late to be answered is
// dropped when its turn comes, never sent, as Acquire's ErrDeadline, and
// handed to drop once out of the queue.
func (g *gate[T]) release(s ratelimit.Signal, latency time.Duration, stale func(T) bool, drop, send func(T)) {
	g.adaptive.ReleaseAfter(s, latency)
	for {
		next, ok := g.waiting.Next()
		if !ok {
			return
		}
		if stale != nil && stale(next.Value) {
			g.waiting.Pop() // its turn, spent
			drop(next.Value)
			continue
		}
		if !g.adaptive.TryAcquire() {
			return
		}
		g.waiting.Pop()
		send(next.Value)
	}
}
