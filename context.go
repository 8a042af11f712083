package rebound

import (
	"context"
	"time"

	"github.com/rebound-go/rebound/internal/callctx"
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

// WithClock returns a context whose calls wait by c. The context's own
// deadline is still real time: a virtual clock is for calls without one.
func WithClock(ctx context.Context, c Clock) context.Context {
	return callctx.WithClock(ctx, c)
}

// WithSideEffects marks the calls made with the returned context as having
// side effects (sending a message, appending to a file, charging a card): a
// timeout does not mean nothing happened, so such a call is attempted
// once, whatever its error. Do and Stream cannot know what a function did
// before it failed, even with a failure to connect; Transport makes an
// attempt again when it provably never reached the server (see
// Transport.SideEffects).
func WithSideEffects(ctx context.Context) context.Context {
	return callctx.WithSideEffects(ctx)
}

// WithTarget names the target of the calls made with the returned context
// ("gpt-x:summarise", say): events, logs and metrics carry it.
func WithTarget(ctx context.Context, target string) context.Context {
	return callctx.WithTarget(ctx, target)
}
