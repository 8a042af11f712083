package rebound

import (
	"context"
	"time"
)

// Observer receives a call's events. Observe is called synchronously on
// the calling goroutine and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventType is what an Event reports.
type EventType uint8

// Event types.
const (
	// EventAttempt: an attempt ended; Err is nil on success.
	EventAttempt EventType = iota + 1
	// EventRetry: a failed attempt will be retried after Wait.
	EventRetry
	// EventGiveUp: the call stopped without success, for Reason.
	EventGiveUp
	// EventContinue: an event stream cut after content is continued by a
	// new request (Transport.Continuations); Attempt is the
	// continuation's number, from 1, and Err the cut.
	EventContinue
	// EventHedge: attempt Attempt, slow to its first token, has a hedge:
	// a second attempt beside it (see Hedge).
	EventHedge
)

var eventNames = [...]string{EventAttempt: "attempt", EventRetry: "retry", EventGiveUp: "give_up", EventContinue: "continue", EventHedge: "hedge"}

func (t EventType) String() string { return enumString(eventNames[:], int(t), "event") }

// Event is one step of a call, as seen by an Observer.
type Event struct {
	Type EventType
	// Target names what was called (see WithTarget); Transport uses the
	// request's host when the context names none.
	Target string
	// Attempt is the attempt number, from 1.
	Attempt int
	// Err is the attempt's error; nil for a successful attempt.
	Err error
	// Verdict is the classifier's verdict on Err (EventRetry, EventGiveUp).
	Verdict Verdict
	// Wait is the wait before the next attempt (EventRetry).
	Wait time.Duration
	// Waited is the call's total wait so far (Wait included).
	Waited time.Duration
	// Reason is why the call stopped (EventGiveUp).
	Reason StopReason
	// Elapsed is the time since the call started.
	Elapsed time.Duration
	// BudgetLeft is how many retries the policy's retry budget still
	// allows (EventRetry, EventGiveUp); -1 when it has none that can say.
	BudgetLeft float64
}

// CallObserver is an Observer that wants to know where each call starts:
// Do, Transport and Stream ask it for the Observer of each call, given the
// call's context, before the first attempt. A tracing observer starts the
// call's span there, as a child of the caller's.
type CallObserver interface {
	Observer
	ObserveCall(ctx context.Context) Observer
}
