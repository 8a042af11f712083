package reboundmcp

import (
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
)

// downCause says why a server went down: its start failed with err, or
// generation g ended for its session or its connection.
func downCause(g *generation, err error) error {
	switch {
	case err != nil:
		return err
	case g.sessionWasLost():
		return errSessionLost
	}
	return errServerExited
}

// restarting tells the log and the observer that the server went down for
// cause and that start n follows after delay.
func (s *session) restarting(n int, cause error, delay time.Duration) {
	s.logInfo("mcp.restart", "start", n, "cause", cause.Error(), "delay_ms", delay.Milliseconds())
	s.observe(rebound.Event{Type: rebound.EventRestart, Attempt: n, Err: cause, Wait: delay})
}

// breakerOpened tells the log and the observer that crashes crashes, the
// last for cause, opened the respawn breaker for cooldown.
func (s *session) breakerOpened(crashes int, cause error, cooldown time.Duration) {
	open := breaker.Open.String()
	s.logInfo("mcp.breaker", "state", open, "crashes", crashes, "cooldown_ms", cooldown.Milliseconds(), "cause", cause.Error())
	s.observe(rebound.Event{Type: rebound.EventBreaker, State: open, Err: cause, Wait: cooldown})
}

// breakerMoved tells the log and the observer that the respawn breaker
// is probing with one start (half-open) or closed again.
func (s *session) breakerMoved(state string) {
	s.logInfo("mcp.breaker", "state", state)
	s.observe(rebound.Event{Type: rebound.EventBreaker, State: state})
}

// observe gives e, about the server as a whole ("mcp:NAME"), to
// Options.Observer, else Policy.Observer.
func (s *session) observe(e rebound.Event) {
	obs := s.o.Observer
	if obs == nil {
		obs = s.o.Policy.Observer
	}
	if obs != nil {
		e.Target = "mcp:" + s.o.Name
		obs.Observe(e)
	}
}
