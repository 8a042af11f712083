package reboundotel

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/rebound-go/rebound/cost"
)

// RecordTask prices each attempt of task under prices (as cost.Table.Spend
// does) and adds it to rebound.cost.usd, and the attempts that produced
// nothing to rebound.cost.wasted.usd too, by target. Call it with what is
// given to cost.Ledger.Add.
func (o *Observer) RecordTask(ctx context.Context, prices cost.Table, task cost.Task) {
	for _, a := range task.Attempts {
		usd := prices[a.Target].Of(a.Usage)
		if !(usd > 0) {
			continue
		}
		opt := metric.WithAttributes(keyTarget.String(a.Target))
		o.cost.Add(ctx, usd, opt)
		if !a.Answered {
			o.wasted.Add(ctx, usd, opt)
		}
	}
}
