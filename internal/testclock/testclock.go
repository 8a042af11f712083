// Package testclock is the clock rebound's tests set by hand, for what a
// testing/synctest bubble cannot give them: a time before 1970, a clock
// that steps back, a time far from the bubble's, or a time that moves only
// when the test says so while a real server (Redis) is called.
//
// Where a test can run in a bubble, it does, and the real clock is its
// clock; this package is for the rest.
package testclock

import (
	"context"
	"sync"
	"time"
)

// Clock is a rebound.Clock that reads the time it was last set to. Sleep
// moves it on at once, so that a call's waits take no real time. The zero
// Clock reads the zero time.Time. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// New returns a clock that reads t.
func New(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set sets the clock to t, earlier or later.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// Add moves the clock by d: on if d is positive, back if it is negative.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Sleep moves the clock on by d at once and returns nil, as a real sleep
// that ran its course would; if ctx is already done, it moves nothing and
// returns ctx's cause. A d of zero or less moves nothing.
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if d > 0 {
		c.Add(d)
	}
	return nil
}
