package sim

import (
	"context"
	"iter"
	"time"

	"github.com/rebound-go/rebound"
)

// A proc is one simulated caller: a function that runs rebound's own code
// (rebound.Do, its retry budget, its backoff and the attempts it makes)
// on a goroutine of its own, which runs only while the scheduler resumes
// it. The scheduler runs one event or one proc at a time, so a simulation
// of thousands of concurrent calls is still one sequence of events, the
// same for the same seed; a proc's waits (a retry's backoff through its
// context's rebound.Clock, an attempt waiting for its answer) are events
// in virtual time. A proc whose call has ended runs the next call
// spawned: a goroutine is made for each call in flight at once, not for
// each call.
type proc struct {
	next  func() (ended, ok bool)
	stop  func()
	yield func(ended bool) bool
	body  func(ctx context.Context) // the call it runs, if busy
	ctx   *callContext              // the call's
	busy  bool                      // running a call, or waiting in one
	// waiting: parked until an event resumes it, or spawned and not yet
	// started. A proc is resumed only then.
	waiting bool
}

// spawn starts body as a call now and runs it until it first waits. Its
// context carries the simulation's clock and ends at deadline (none if
// zero), or when the simulation ends (see endProcs). spawn is called by
// the scheduler's goroutine (an event, or before the events run), never
// by a proc.
func (s *scheduler) spawn(deadline time.Time, body func(ctx context.Context)) {
	var p *proc
	if n := len(s.free); n > 0 {
		p, s.free = s.free[n-1], s.free[:n-1]
	} else {
		p = &proc{}
		p.next, p.stop = iter.Pull(func(yield func(bool) bool) {
			p.yield = yield
			for {
				p.body(p.ctx)
				if !yield(true) { // the call has ended; wait for another
					return
				}
			}
		})
		s.procs = append(s.procs, p)
	}
	ctx := &callContext{Context: rebound.WithClock(context.Background(), procClock{s}), deadline: deadline, done: make(chan struct{})}
	if !deadline.IsZero() {
		s.at(deadline, func() { ctx.end(context.DeadlineExceeded) })
	}
	p.body, p.ctx, p.busy, p.waiting = body, ctx, true, true
	s.resume(p)
}

// resume runs p until it waits again or its call ends. It is called by
// the scheduler's goroutine: a proc never runs another.
func (s *scheduler) resume(p *proc) {
	if s.current != nil {
		panic("sim: a proc resumed another")
	}
	if !p.busy || !p.waiting {
		panic("sim: a proc resumed that waits for nothing")
	}
	s.current, p.waiting = p, false
	defer func() { s.current = nil }()
	if ended, _ := p.next(); ended {
		p.body, p.ctx, p.busy = nil, nil, false
		s.free = append(s.free, p)
	}
}

// self returns the proc running; only a proc may call it.
func (s *scheduler) self() *proc {
	if s.current == nil {
		panic("sim: a wait outside a simulated call")
	}
	return s.current
}

// park suspends the proc running until an event resumes it. It returns
// false when the simulation is ending instead: the proc's context is
// done, and it must return.
func (s *scheduler) park() bool {
	p := s.self()
	p.waiting = true
	return p.yield(false)
}

// endProcs ends the procs: each call still waiting sees its context
// canceled, and whatever it waits for fails, so that its rebound.Do
// returns; then every proc's goroutine ends. A simulation calls it when
// it stops, whatever stopped it.
func (s *scheduler) endProcs() {
	for _, p := range s.procs {
		if p.busy {
			p.ctx.end(context.Canceled)
		}
		s.current = p
		p.stop()
		s.current = nil
	}
	s.procs, s.free = nil, nil
}

// procClock is the rebound.Clock of a scheduler's procs: Sleep parks the
// proc running until the scheduler's clock has moved on by d.
type procClock struct{ s *scheduler }

func (c procClock) Now() time.Time { return c.s.clock.Now() }

// Sleep waits for d of virtual time, or until ctx's deadline if that
// comes first, and then returns ctx's cause if ctx is done.
func (c procClock) Sleep(ctx context.Context, d time.Duration) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	wake := c.s.clock.Now().Add(d)
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(wake) {
		wake = deadline
	}
	p := c.s.self()
	c.s.at(wake, func() { c.s.resume(p) })
	c.s.park()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// callContext is a proc's context: it carries the simulation's clock,
// and it is done once the clock reaches its deadline (in virtual time,
// unlike context.WithDeadline's) or the simulation ends.
type callContext struct {
	context.Context // the clock, and no deadline or cancellation of its own
	deadline        time.Time
	done            chan struct{}
	err             error
}

func (c *callContext) Deadline() (time.Time, bool) { return c.deadline, !c.deadline.IsZero() }
func (c *callContext) Done() <-chan struct{}       { return c.done }

func (c *callContext) Err() error {
	select {
	case <-c.done:
		return c.err
	default:
		return nil
	}
}

// end makes c done with err, unless it is already.
func (c *callContext) end(err error) {
	if c.err == nil {
		c.err = err
		close(c.done)
	}
}
