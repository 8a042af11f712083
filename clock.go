package rebound

import (
	"context"
	"time"
)

// Clock is the time a call waits by. Do and Transport use the real clock
// unless the context carries another (see WithClock): a simulation runs
// rebound's real retry, breaker and fallback code a month at a time by
// giving it a virtual clock that jumps instead of sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, and then returns ctx's
	// cause.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error { return sleep(ctx, d) }

type clockKey struct{}

// WithClock returns a context whose calls wait by c. The context's own
// deadline is still real time: a virtual clock is for calls without one.
func WithClock(ctx context.Context, c Clock) context.Context {
	return context.WithValue(ctx, clockKey{}, c)
}

// ClockFrom returns the clock of ctx: the one given to WithClock, else the
// real clock.
func ClockFrom(ctx context.Context) Clock {
	if c, ok := ctx.Value(clockKey{}).(Clock); ok {
		return c
	}
	return realClock{}
}
