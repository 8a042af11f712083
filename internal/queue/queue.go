// Package queue decides whose turn it is among calls waiting in priority
// classes: the queue discipline of ratelimit.Adaptive, written once so that
// the limit and the simulator (which runs the limit's real code in virtual
// time) take turns by the same rule.
//
// Class 0 goes first; within a class, first in, first out. A class that
// waits is never starved: each time a call of a higher class is handed out
// while a lower class has calls waiting, that lower class is passed over
// once, and a class passed over MaxPassOver times goes next. The count is a
// class's, kept from one turn of the class to the next; it starts at zero
// when the class's first call arrives, and again after each of its turns.
// So the oldest call of a class sees at most MaxPassOver calls of higher
// classes go ahead of it before either it goes or a call of its own class
// older than it does.
//
// The bound counts turns, not time, because only a count is a promise the
// queue can keep: slots come free when calls end, and however long a call
// of a lower class has waited, it cannot be served before a slot frees; a
// count says how many of those slots it shares, whatever the calls' length.
// It also keeps the queue a pure structure, with no clock and no
// goroutines.
//
// A Queue is not safe for concurrent use; its owner guards it.
package queue

import "container/list"

// Queue holds waiting values of type T in classes 0 to Classes-1. Its zero
// value is not usable; use New.
type Queue[T any] struct {
	maxPassOver int
	classes     []class
	n           int // values waiting, all classes
}

type class struct {
	waiting    list.List // of *Item, oldest first
	passedOver int       // turns of higher classes since this class's last, while it waited
}

// An Item is a value's place in a Queue, from Push until Pop hands it out
// or Remove takes it away.
type Item[T any] struct {
	Value T
	class int
	elem  *list.Element // nil once out of the queue
}

// New returns a queue of classes classes (at least 1) in which a class is
// passed over at most maxPassOver times (at least 1) before it goes next.
func New[T any](classes, maxPassOver int) *Queue[T] {
	return &Queue[T]{maxPassOver: max(maxPassOver, 1), classes: make([]class, max(classes, 1))}
}

// Push puts v at the back of class c; a class beyond the last is the last.
func (q *Queue[T]) Push(c int, v T) *Item[T] {
	c = min(max(c, 0), len(q.classes)-1)
	it := &Item[T]{Value: v, class: c}
	it.elem = q.classes[c].waiting.PushBack(it)
	q.n++
	return it
}

// Remove takes it out of the queue, and reports whether it was waiting:
// false means it was handed out by Pop, or removed, before.
func (q *Queue[T]) Remove(it *Item[T]) bool {
	if it.elem == nil {
		return false
	}
	q.take(it)
	return true
}

// Next returns the item whose turn it is, without taking it out; false if
// none waits.
func (q *Queue[T]) Next() (*Item[T], bool) {
	if q.n == 0 {
		return nil, false
	}
	// A class due for its turn goes first; of several, the lowest, for
	// the others are only passed over by higher classes.
	for c := len(q.classes) - 1; c > 0; c-- {
		if q.classes[c].waiting.Len() > 0 && q.classes[c].passedOver >= q.maxPassOver {
			return q.classes[c].waiting.Front().Value.(*Item[T]), true
		}
	}
	for c := range q.classes {
		if q.classes[c].waiting.Len() > 0 {
			return q.classes[c].waiting.Front().Value.(*Item[T]), true
		}
	}
	panic("queue: count and classes disagree")
}

// Pop takes out the item whose turn it is and returns it; false if none
// waits. Every lower class with calls waiting is passed over once.
func (q *Queue[T]) Pop() (*Item[T], bool) {
	it, ok := q.Next()
	if !ok {
		return nil, false
	}
	q.take(it)
	q.classes[it.class].passedOver = 0
	for c := it.class + 1; c < len(q.classes); c++ {
		if q.classes[c].waiting.Len() > 0 {
			q.classes[c].passedOver++
		}
	}
	return it, true
}

// take takes it out of its class; a class left empty starts its count
// again, since no call of it is waiting to be passed over.
func (q *Queue[T]) take(it *Item[T]) {
	cl := &q.classes[it.class]
	cl.waiting.Remove(it.elem)
	it.elem = nil
	q.n--
	if cl.waiting.Len() == 0 {
		cl.passedOver = 0
	}
}

// Len returns how many values wait, all classes.
func (q *Queue[T]) Len() int { return q.n }

// LenOf returns how many values of class c wait.
func (q *Queue[T]) LenOf(c int) int {
	c = min(max(c, 0), len(q.classes)-1)
	return q.classes[c].waiting.Len()
}
