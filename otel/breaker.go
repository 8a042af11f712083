package reboundotel

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/rebound-go/rebound/breaker"
)

// BreakerStateChange records a circuit breaker's change of state in
// rebound.breaker.state (0 closed, 1 half-open, 2 open: higher is worse)
// and rebound.breaker.changes. Its signature fits
// breaker.Config.OnStateChange:
//
//	b := breaker.New("gpt-x:summarise", breaker.Config{OnStateChange: obs.BreakerStateChange})
//
// A breaker is reported from its first change on. A rebound.EventBreaker
// given to Observe (from breaker.Notify, or reboundmcp's respawn breaker)
// is recorded the same way, its Target as the breaker's name.
func (o *Observer) BreakerStateChange(c breaker.Change) {
	o.breakerEntered(context.Background(), c.Name, c.To.String())
}

// breakerEntered records that the breaker name entered state, as
// breaker.State names it.
func (o *Observer) breakerEntered(ctx context.Context, name, state string) {
	attr := keyBreakerName.String(name)
	o.breakerState.Record(ctx, stateValue(state), metric.WithAttributes(attr))
	o.breakerChanges.Add(ctx, 1, metric.WithAttributes(attr, keyBreakerState.String(state)))
}

// stateValue orders breaker states by severity; a state rebound does not
// name counts as open.
func stateValue(state string) int64 {
	switch state {
	case breaker.Closed.String():
		return 0
	case breaker.HalfOpen.String():
		return 1
	}
	return 2
}
