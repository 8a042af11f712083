// Package sim runs rebound's real code (Do and Run, with their retry
// budget and backoff, breakers, fallback chains, adaptive limits) against
// modelled providers in virtual time: a month of agent traffic runs in
// seconds, and the same seed gives the same numbers.
//
// Nothing here re-implements a retry decision. A simulation gives the calls
// a Clock (rebound.WithClock) that jumps instead of sleeping, gives the
// breakers and limits the same clock, and models only the provider: which
// attempt fails, how, when it is answered and what it costs. Calls that
// run side by side (occ, overload) are procs (proc.go): each runs
// rebound.Run on a goroutine of its own that runs only when the
// simulation's events say, one at a time.
package sim

import (
	"context"
	"time"
)

// Clock is a virtual clock, a rebound.Clock whose Sleep moves it forward at
// once; the calls, breakers and limits of one simulation all go by it. It
// is not safe for concurrent use: a simulation runs on one goroutine.
type Clock struct {
	now time.Time
}

// NewClock returns a clock that reads start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return c.now }

// Sleep moves the clock forward by d, unless ctx is already done.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	c.Advance(d)
	return nil
}

// Advance moves the clock forward by d (a negative d is ignored).
func (c *Clock) Advance(d time.Duration) {
	if d > 0 {
		c.now = c.now.Add(d)
	}
}

// AdvanceTo moves the clock to t if t is later.
func (c *Clock) AdvanceTo(t time.Time) {
	if t.After(c.now) {
		c.now = t
	}
}
