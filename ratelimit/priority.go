package ratelimit

import "context"

// Priority is the class of a call waiting for a slot of an Adaptive limit.
// The zero value is Interactive, so a call nobody marked is interactive.
type Priority uint8

// Priorities, highest first.
const (
	// Interactive calls have a person or an agent waiting on them; they
	// go before every waiting Batch call, within the Adaptive limit's
	// bound on passing a class over (AdaptiveConfig.MaxPassOver).
	Interactive Priority = iota
	// Batch calls are work nobody is waiting on at the moment: a
	// batch.Runner marks its requests so. They take the slots
	// interactive calls leave, and a share of at least one in
	// MaxPassOver+1 of the slots that come free while both wait.
	Batch
)

// String returns "interactive" or "batch".
func (p Priority) String() string {
	if p == Interactive {
		return "interactive"
	}
	return "batch"
}

// priorityKey is the context key of a call's Priority.
type priorityKey struct{}

// WithPriority returns a copy of ctx whose calls wait for an Adaptive
// slot as p. A value beyond Batch counts as Batch.
func WithPriority(ctx context.Context, p Priority) context.Context {
	return context.WithValue(ctx, priorityKey{}, min(p, Batch))
}

// PriorityFrom returns the Priority WithPriority put in ctx, or
// Interactive if none.
func PriorityFrom(ctx context.Context) Priority {
	p, _ := ctx.Value(priorityKey{}).(Priority)
	return p
}
