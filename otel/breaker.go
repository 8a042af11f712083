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
// A breaker is reported from its first change on.
func (o *Observer) BreakerStateChange(c breaker.Change) {
	ctx := context.Background()
	name := keyBreakerName.String(c.Name)
	o.breakerState.Record(ctx, stateValue(c.To), metric.WithAttributes(name))
	o.breakerChanges.Add(ctx, 1, metric.WithAttributes(name, keyBreakerState.String(c.To.String())))
}

// stateValue orders breaker states by severity.
func stateValue(s breaker.State) int64 {
	switch s {
	case breaker.Closed:
		return 0
	case breaker.HalfOpen:
		return 1
	}
	return 2
}
