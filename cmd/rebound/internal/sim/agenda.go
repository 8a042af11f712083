package sim

import (
	"container/heap"
	"time"
)

// agenda is a simulation's future events. They run in order of time, and
// those due at the same time in the order they were scheduled, so that a
// run is the same every time.
type agenda struct {
	events eventQueue
	seq    int
}

type event struct {
	at  time.Time
	seq int
	fn  func()
}

// at schedules fn to run at t.
func (a *agenda) at(t time.Time, fn func()) {
	a.seq++
	heap.Push(&a.events, event{at: t, seq: a.seq, fn: fn})
}

// next removes and returns the earliest event; false if none is left.
func (a *agenda) next() (event, bool) {
	if a.events.Len() == 0 {
		return event{}, false
	}
	return heap.Pop(&a.events).(event), true
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}
