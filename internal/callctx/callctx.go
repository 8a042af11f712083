// Package callctx holds the marks a call's context carries: the clock its
// waits go by, the target it names, and whether it has side effects. The
// root package sets them (rebound.WithClock, WithTarget, WithSideEffects);
// the engine and the house's other packages (limiters, fallback chains,
// observers) read them here, so that each mark has one key.
package callctx

import (
	"context"
	"time"
)

// Clock is the time a call waits by: the method set of rebound.Clock,
// which documents it.
type Clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

type (
	clockKey       struct{}
	targetKey      struct{}
	sideEffectsKey struct{}
)

// WithClock returns a context whose calls wait by c.
func WithClock(ctx context.Context, c Clock) context.Context {
	return context.WithValue(ctx, clockKey{}, c)
}

// ClockOf returns the clock of ctx: the one given to WithClock, else the
// real clock.
func ClockOf(ctx context.Context) Clock {
	if c, ok := ctx.Value(clockKey{}).(Clock); ok {
		return c
	}
	return Real
}

// Real is the real clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Sleep waits for d or until ctx is done, and returns ctx's cause if that
// came first.
func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// WithTarget returns a context whose calls name target.
func WithTarget(ctx context.Context, target string) context.Context {
	return &targetCtx{Context: ctx, target: target}
}

// targetCtx carries a target in one allocation: context.WithValue would
// take two, its own and the string's boxing into an interface. Its Value
// answers a pointer into itself, which boxes without allocating.
type targetCtx struct {
	context.Context
	target string
}

func (c *targetCtx) Value(key any) any {
	if key == (targetKey{}) {
		return &c.target
	}
	return c.Context.Value(key)
}

// String names the context as context.WithValue's would, without the
// target's name, which the caller may not want printed.
func (c *targetCtx) String() string {
	if s, ok := c.Context.(interface{ String() string }); ok {
		return s.String() + ".WithTarget"
	}
	return "context.WithTarget"
}

// Target returns the target named by WithTarget, or "".
func Target(ctx context.Context) string {
	if t, ok := ctx.Value(targetKey{}).(*string); ok {
		return *t
	}
	return ""
}

// WithSideEffects returns a context whose calls have side effects.
func WithSideEffects(ctx context.Context) context.Context {
	return context.WithValue(ctx, sideEffectsKey{}, true)
}

// SideEffects reports whether ctx carries the WithSideEffects mark.
func SideEffects(ctx context.Context) bool {
	marked, _ := ctx.Value(sideEffectsKey{}).(bool)
	return marked
}
