package reboundmcp

import (
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/rebound-go/rebound"
)

// A call's first attempt, when the server is up, is written on the
// goroutine that took the call from the client, and awaited by no
// goroutine: the server's reader hands it the answer (firstAnswered), the
// generation's end tells it of a crash (firstCut), a timer of the idle
// timeout (firstIdle). Whichever takes the attempt from the generation's
// waits first ends it (a write that found the generation ended before it
// was awaited ends it itself); only then, and only if the call must be sent again
// or wait, does it get a goroutine (goOn). Over a stdio server this costs
// a call no hand-off between goroutines: the copy of the request from the
// client to the server and of the answer back are each made on the one
// goroutine that read it.

// firstAlone says whether the call's first attempt may be made without a
// goroutine: to a child's standard input, a pipe with room for a request
// (an HTTP request is written by a round trip, and a connection without
// room would hold up the client's next messages), and with no Observer,
// Breaker or Budget, whose accounts rebound.Do keeps for every attempt.
func (s *session) firstAlone() bool {
	p := &s.o.Policy
	return s.t.up.inline && s.o.Observer == nil && p.Observer == nil && p.Breaker == nil && p.Budget == nil
}

// tryFirst makes the call's first attempt without a goroutine, if the
// session allows it and the server is up and ready for it; it says
// whether it did.
func (c *call) tryFirst() bool {
	s := c.s
	if !s.firstAlone() {
		return false
	}
	g := s.sup.current()
	if g == nil || g.isDead() || c.mustAwaitListing() {
		return false
	}
	c.attempts, c.firstGen = 1, g.n
	id := s.nextID.Add(1)
	c.mu.Lock()
	c.first, c.firstN = g, id
	c.mu.Unlock()
	if idle := s.o.idleTimeout(); idle > 0 && !lasting[c.req.Method] {
		c.idleAt.Store(time.Now().Add(idle).UnixNano())
		s.watchIdle(idle)
	}
	if err := g.write(s.ctx, id, waiter{call: c}, c.req.Method, c.req.Params); err != nil {
		// The generation's end takes the attempts it awaits; one it died
		// before awaiting (errNotSent) it never saw, and is this one's.
		if _, _, ok := c.takeFirst(); ok || errors.Is(err, errNotSent) {
			c.goOn(c.writeFailed(s.ctx, g, err))
		}
	}
	return true
}

// mustAwaitListing says whether a tools/call is of a tool not yet seen
// listed while a listing runs: it waits for the listing (awaitListing) on
// a goroutine of its own.
func (c *call) mustAwaitListing() bool {
	if c.req.Method != "tools/call" {
		return false
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	_, known := c.s.state.tools[c.tool]
	return !known && c.s.state.listing
}

// takeFirst takes the call's first attempt, awaited without a goroutine,
// from its generation's waits, and stops its timer; ok says whether the
// attempt was still awaited, and so is the caller's to end.
func (c *call) takeFirst() (g *generation, id int64, ok bool) {
	c.mu.Lock()
	g, id = c.first, c.firstN
	c.first = nil
	c.idleAt.Store(0)
	c.mu.Unlock()
	if g == nil {
		return nil, 0, false
	}
	return g, id, g.forget(id)
}

// firstAnswered ends the first attempt with the server's answer, on the
// goroutine that read it.
func (c *call) firstAnswered(g *generation, resp *jsonrpc.Response) {
	c.takeFirst() // the reader took it from the waits already; this stops the timer
	resp, err := c.judge(g, resp)
	if err != nil {
		c.goOn(nil, err)
		return
	}
	c.finish(resp, nil)
}

// firstCut ends the first attempt of a call its generation died under.
func (c *call) firstCut(g *generation) {
	c.takeFirst()
	c.goOn(nil, c.cut(g, errServerExited))
}

// watchIdle makes sure the session's idle watch is set, for first
// attempts awaited without a goroutine. One timer for them all, set only
// when none is, rather than one per call: a timer set per call would wake
// a sleeping thread of the runtime's at every call.
func (s *session) watchIdle(idle time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.idleWatch == nil:
		s.idleWatch = time.AfterFunc(idle, s.sweepIdle)
	case !s.idleWatching:
		s.idleWatch.Reset(idle)
	}
	s.idleWatching = true
}

// sweepIdle ends the first attempts that had no answer and no progress
// for the idle timeout, and sets the watch again for the next one due.
func (s *session) sweepIdle() {
	if !s.enter() {
		return // closing: the generation's end takes the attempts
	}
	defer s.wg.Done()
	now := time.Now().UnixNano()
	var due []*call
	var next int64
	s.mu.Lock()
	for _, c := range s.calls {
		switch at := c.idleAt.Load(); {
		case at == 0:
		case at <= now:
			due = append(due, c)
		case next == 0 || at < next:
			next = at
		}
	}
	s.idleWatching = next != 0 && s.ctx.Err() == nil
	if s.idleWatching {
		s.idleWatch.Reset(time.Duration(next - now))
	}
	s.mu.Unlock()
	idle := s.o.idleTimeout()
	for _, c := range due {
		if g, id, ok := c.takeFirst(); ok {
			c.goOn(nil, c.idleTimedOut(g, id, idle))
		}
	}
}

// idleTimedOut cancels request id at the server, and returns the error
// the call ends with.
func (c *call) idleTimedOut(g *generation, id int64, idle time.Duration) error {
	c.tellCancelled(g, id, "no answer or progress within the idle timeout")
	err := fmt.Errorf("reboundmcp: %s got no answer and no progress from MCP server %s for %v; it was cancelled", c.what(), c.s.o.Name, idle)
	return rebound.Permanent(&callError{code: jsonrpc.CodeInternalError, msg: err.Error(), outcome: "idle_timeout"})
}
