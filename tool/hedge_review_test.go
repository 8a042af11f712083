package tool_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/tool"
)

// T1: "Hedge, for a ReadOnly tool only": an Idempotent tool whose
// Spec.Policy carries a rebound.Hedge is hedged all the same (two
// concurrent runs of one side effect under one key), and Validate accepts it.
func TestReviewIdempotentToolHedgedThroughPolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var running, most atomic.Int32
		fn := func(ctx context.Context, c tool.Call) (string, error) {
			n := running.Add(1)
			defer running.Add(-1)
			if n > most.Load() {
				most.Store(n)
			}
			select {
			case <-time.After(5 * time.Second):
				return "charged", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		spec := tool.Spec{Kind: tool.Idempotent, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}}
		if err := spec.Validate(); err == nil {
			t.Errorf("Validate accepts a Policy.Hedge on an Idempotent tool")
		}
		var r tool.Registry
		r.Register("charge", spec, fn)
		r.Execute(t.Context(), tool.Call{ID: "c1", Name: "charge", Arguments: []byte(`{"usd":5}`)})
		if most.Load() > 1 {
			t.Errorf("%d runs of the Idempotent tool at once; want 1 (hedges are for ReadOnly tools)", most.Load())
		}
	})
}
