package reboundmcp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
)

// supervisor holds the generation that is up, if one is, and wakes the
// calls waiting for one.
type supervisor struct {
	mu        sync.Mutex
	gen       *generation   // up and ready, or nil
	changed   chan struct{} // closed and replaced at every change
	downSince time.Time
	open      bool // the respawn breaker is open
	starting  bool // a start is under way: calls wait for it whatever DownWait says
}

func (sp *supervisor) init() {
	sp.changed = make(chan struct{})
	sp.downSince = time.Now()
	sp.starting = true // the first start, which supervise is about to make
}

// current returns the generation that is up, or nil.
func (sp *supervisor) current() *generation {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.gen
}

// set makes g (nil: none) the generation that is up and the breaker open
// or not, and wakes the waiting calls.
func (sp *supervisor) set(g *generation, open bool) {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if sp.gen != nil && g == nil {
		sp.downSince = time.Now()
	}
	sp.gen, sp.open, sp.starting = g, open, false
	close(sp.changed)
	sp.changed = make(chan struct{})
}

// waitReady returns the generation that is up, waiting for one until
// DownWait after the server went down; with the breaker open, it fails at
// once.
func (s *session) waitReady(ctx context.Context) (*generation, error) {
	sp := &s.sup
	downWait := orDefault(s.o.DownWait, defaultDownWait)
	for {
		sp.mu.Lock()
		g, changed, open, since, starting := sp.gen, sp.changed, sp.open, sp.downSince, sp.starting
		sp.mu.Unlock()
		if g != nil && !g.isDead() {
			return g, nil
		}
		if g != nil || starting { // dead and its supervisor not yet told, or a start is under way
			select {
			case <-changed:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		if open {
			return nil, fmt.Errorf("%w: %s crashed too often; its restarts are paused", ErrServerDown, s.o.Name)
		}
		left := time.Until(since.Add(downWait))
		if left <= 0 {
			return nil, fmt.Errorf("%w: %s has been down for more than %v", ErrServerDown, s.o.Name, max(downWait, 0))
		}
		t := time.NewTimer(left)
		select {
		case <-changed:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		t.Stop()
	}
}

// supervise starts the server and restarts it whenever it dies, under
// rebound.Do: each run of Do is a streak of starts that ends when one runs
// healthily for HealthyAfter, so that the backoff starts over; the next
// streak begins with that start's death. The engine waits between starts
// as restarts.policy says (at once, then RestartMin doubling to RestartMax)
// and asks the respawn breaker, a breaker.Breaker, before each; the
// breaker's cool-down pauses the restarts, then lets one start probe.
func (s *session) supervise() {
	r := &restarts{s: s, healthyAfter: positive(s.o.HealthyAfter, defaultHealthyAfter)}
	p := r.policy()
	defer func() {
		if r.running != nil {
			r.running.end(false)
		}
	}()
	for s.ctx.Err() == nil {
		// The streak's context is the session's life and nothing else: a
		// mark the caller's context carries (WithSideEffects, a Guard)
		// would end a streak at its first crash, and the restarts would
		// then come with no backoff at all.
		ctx, stop := context.WithCancel(context.Background())
		unhook := context.AfterFunc(s.ctx, stop)
		r.stop = stop
		rebound.Do(ctx, p, r.run)
		unhook()
		stop()
		if opened := r.openedAt; !opened.IsZero() {
			// The breaker opened, and stopped the streak: no restart
			// until the cool-down is over.
			r.openedAt = time.Time{}
			if !s.sleep(time.Until(opened.Add(r.cooldown))) {
				return
			}
			s.sup.set(nil, false)
		}
	}
}

// restarts is what the supervisor keeps across the starts it makes.
type restarts struct {
	s            *session
	healthyAfter time.Duration
	n            int                // the number of the last start
	running      *generation        // a start that ran healthily, still up: its death begins the next streak
	lostBefore   bool               // the last start ended in a lost session
	cause        error              // why the server last went down
	stop         context.CancelFunc // ends the streak's Do
	cooldown     time.Duration      // the breaker's
	openedAt     time.Time          // when the breaker opened and ended the streak; zero if it did not
}

// down is a server's going down, as an attempt of the supervisor's Do
// fails with it.
type down struct {
	cause error
	// atOnce: the next start comes at once, whatever the backoff says (a
	// lost session was the server's refusal: nothing ran).
	atOnce bool
}

func (d *down) Error() string { return d.cause.Error() }
func (d *down) Unwrap() error { return d.cause }

// run is one attempt of a streak: the death of the start a healthy run
// left up, or a new start, which fails when it dies before HealthyAfter.
func (r *restarts) run(ctx context.Context) (struct{}, error) {
	s := r.s
	g := r.running
	r.running = nil
	if g == nil {
		r.n++
		s.sup.mu.Lock()
		s.sup.starting = true
		s.sup.mu.Unlock()
		var err error
		if g, err = s.start(r.n); err != nil {
			s.sup.set(nil, false) // the start failed: down, no longer starting
			return struct{}{}, r.wentDown(nil, err)
		}
		s.sup.set(g, false)
		if r.healthy(ctx, g) {
			r.running = g
			return struct{}{}, nil
		}
	} else {
		select {
		case <-g.dead:
		case <-ctx.Done():
			g.end(false)
		}
	}
	s.sup.set(nil, false)
	return struct{}{}, r.wentDown(g, nil)
}

// healthy waits for g to run for healthyAfter, and says whether it did
// before it died or ctx ended.
func (r *restarts) healthy(ctx context.Context, g *generation) bool {
	t := time.NewTimer(r.healthyAfter)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-g.dead:
	case <-ctx.Done():
		g.end(false)
	}
	return false
}

// wentDown notes why the server went down: its start failed with err, or
// generation g ended.
func (r *restarts) wentDown(g *generation, err error) error {
	r.cause = downCause(g, err)
	// A lost session is reopened at once, unless the one before was lost
	// too and this one answered none of the client's requests.
	lost := err == nil && g.sessionWasLost()
	d := &down{cause: r.cause, atOnce: lost && !(r.lostBefore && !g.served.Load())}
	r.lostBefore = lost
	return d
}

// policy is the engine's rule for the restarts: as many as it takes, the
// first of a streak at once and then RestartMin doubling to RestartMax,
// each drawn from the upper half of its span (JitterEqual); a lost
// session's at once, as a server's wait of none; and the respawn breaker.
func (r *restarts) policy() rebound.Policy {
	o := r.s.o
	lo := positive(o.RestartMin, defaultRestartMin)
	hi := max(positive(o.RestartMax, defaultRestartMax), lo)
	p := rebound.Policy{
		MaxAttempts: math.MaxInt,
		WaitBudget:  math.MaxInt64,
		MaxDelay:    hi,
		Jitter:      rebound.JitterEqual,
		Schedule: func(retry int) time.Duration {
			if retry == 1 {
				return 0
			}
			d := lo
			for i := 2; i < retry && d < hi; i++ {
				d *= 2
			}
			return d
		},
		Classifier: func(err error) rebound.Verdict {
			var d *down
			return rebound.Verdict{Kind: rebound.KindTransient, HasServerWait: errors.As(err, &d) && d.atOnce}
		},
		Observer: rebound.ObserverFunc(func(e rebound.Event) {
			// A session that is closing restarts nothing, though the
			// streak's Do may not have seen it end yet.
			if e.Type == rebound.EventRetry && r.openedAt.IsZero() && r.s.ctx.Err() == nil {
				r.s.restarting(r.n+1, r.cause, e.Wait)
			}
		}),
	}
	if b := r.breaker(); b != nil {
		p.Breaker = b
	}
	return p
}

// breaker returns the respawn breaker: CrashLimit crashes within
// CrashWindow open it for CrashCooldown; then one start probes, which
// closes it once it has run for HealthyAfter, or opens it again when it
// dies sooner. It is nil for a negative CrashLimit.
func (r *restarts) breaker() *healthyRuns {
	o := r.s.o
	limit := orDefault(o.CrashLimit, defaultCrashLimit)
	if limit < 0 {
		return nil
	}
	r.cooldown = positive(o.CrashCooldown, defaultCrashCooldown)
	b := breaker.New("mcp:"+o.Name, breaker.Config{
		// Crashes alone reach its window (see healthyRuns), so a rate of
		// 1 over CrashLimit calls is CrashLimit crashes within it.
		ConsecutiveFailures: -1,
		FailureRate:         1,
		MinCalls:            limit,
		Window:              positive(o.CrashWindow, defaultCrashWindow),
		Cooldown:            r.cooldown,
		Probes:              1,
		Successes:           1,
		OnStateChange: func(c breaker.Change) {
			switch c.To {
			case breaker.Open:
				crashes := limit
				if c.From == breaker.HalfOpen {
					crashes = 1 // the probe's
				}
				r.openedAt = c.At
				r.s.breakerOpened(crashes, r.cause, r.cooldown)
				r.s.sup.set(nil, true)
				r.stop()
			default:
				r.s.breakerMoved(c.To.String())
			}
		},
	})
	return &healthyRuns{b}
}

// healthyRuns is the respawn breaker as the supervisor's Do sees it: a
// healthy run closes it when it probes, and is not counted while it is
// closed, so that its window holds crashes alone.
type healthyRuns struct{ *breaker.Breaker }

// Done reports how a start ended.
func (h *healthyRuns) Done(p rebound.Permit, o rebound.Outcome) {
	if o == rebound.OutcomeSuccess && h.State() == breaker.Closed {
		o = rebound.OutcomeIgnored
	}
	h.Breaker.Done(p, o)
}

// sleep waits d, or less if the session closes; it says whether the
// session is still open.
func (s *session) sleep(d time.Duration) bool {
	if d <= 0 {
		return s.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.ctx.Done():
		return false
	}
}

// start opens generation n: dials the server, starts reading it, and
// replays the client's session state on it.
func (s *session) start(n int) (*generation, error) {
	conn, err := s.t.up.dial(s.ctx, s.o)
	if err != nil {
		return nil, err
	}
	g := newGeneration(s, conn, n)
	if !s.spawn(func() { g.read(s.ctx) }) {
		g.end(false)
		return nil, s.ctx.Err()
	}
	if err := s.replay(g); err != nil {
		g.end(false)
		return nil, err
	}
	return g, nil
}
