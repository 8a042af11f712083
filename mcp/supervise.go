package reboundmcp

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// supervisor holds the generation that is up, if one is, and wakes the
// calls waiting for one.
type supervisor struct {
	mu        sync.Mutex
	gen       *generation   // up and ready, or nil
	changed   chan struct{} // closed and replaced at every change
	downSince time.Time
	open      bool // the respawn breaker
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

// supervise starts the server, restarts it whenever it dies (at once after
// a healthy run, then after a jittered backoff from RestartMin doubling to
// RestartMax) and stops restarting it for CrashCooldown after CrashLimit
// crashes within CrashWindow, then probes with one start.
func (s *session) supervise() {
	o := s.o
	healthyAfter := positive(o.HealthyAfter, defaultHealthyAfter)
	limit := orDefault(o.CrashLimit, defaultCrashLimit)
	window := positive(o.CrashWindow, defaultCrashWindow)
	var crashes []time.Time
	backoff, probing, lostBefore := 0, false, false
	for n := 1; ; n++ {
		s.sup.mu.Lock()
		s.sup.starting = true
		s.sup.mu.Unlock()
		g, err := s.start(n)
		if err == nil {
			s.sup.set(g, false)
			healed := func() {
				if probing {
					probing = false
					s.breakerMoved(breakerClosed)
				}
			}
			if s.waitDeath(g, healthyAfter, healed) {
				backoff = 0
				crashes = crashes[:0]
			}
			s.sup.set(nil, false)
		}
		if s.ctx.Err() != nil {
			return
		}
		if err != nil {
			s.sup.set(nil, false) // the start failed: down, no longer starting
		}
		cause := downCause(g, err)
		now := time.Now()
		crashes = append(keepSince(crashes, now.Add(-window)), now)
		if probing || (limit > 0 && len(crashes) >= limit) {
			cooldown := positive(o.CrashCooldown, defaultCrashCooldown)
			s.breakerOpened(len(crashes), cause, cooldown)
			s.sup.set(nil, true)
			if !s.sleep(cooldown) {
				return
			}
			s.breakerMoved(breakerHalfOpen)
			s.sup.set(nil, false)
			crashes, backoff, probing = crashes[:0], 0, true
			continue
		}
		var delay time.Duration
		// A lost session was the server's refusal: nothing ran, and the
		// next session is opened at once, unless the one before was lost
		// too and this one answered none of the client's requests.
		lost := err == nil && g.sessionWasLost()
		if !lost || lostBefore && !g.served.Load() {
			delay = s.restartDelay(backoff)
			backoff++
		}
		lostBefore = lost
		s.restarting(n+1, cause, delay)
		if !s.sleep(delay) {
			return
		}
	}
}

// waitDeath waits for g to die or the session to close, and says whether
// g ran healthily for healthyAfter first; it calls healed when g has.
func (s *session) waitDeath(g *generation, healthyAfter time.Duration, healed func()) (healthy bool) {
	t := time.NewTimer(healthyAfter)
	defer t.Stop()
	for {
		select {
		case <-g.dead:
			return healthy
		case <-s.ctx.Done():
			g.end(false)
			return healthy
		case <-t.C:
			healthy = true
			healed()
		}
	}
}

// restartDelay is the wait before restart n after the last healthy run
// (n = 0 for the first): none, then RestartMin doubling to RestartMax,
// each drawn from its upper half.
func (s *session) restartDelay(n int) time.Duration {
	if n == 0 {
		return 0
	}
	lo := positive(s.o.RestartMin, defaultRestartMin)
	hi := max(positive(s.o.RestartMax, defaultRestartMax), lo)
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
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

// keepSince drops the times before since.
func keepSince(ts []time.Time, since time.Time) []time.Time {
	i := 0
	for i < len(ts) && ts[i].Before(since) {
		i++
	}
	return append(ts[:0], ts[i:]...)
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
