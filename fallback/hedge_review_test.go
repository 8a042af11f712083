package fallback_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/fallback"
)

// F1: a racer that failed while its hedge ran has its Err in the trail
// but no verdict: the zero Verdict, which reads as KindTransient, though
// the error was permanent.
func TestReviewHedgedTrailVerdicts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		call := func(ctx context.Context, req string) (string, error) {
			if calls.Add(1) == 1 {
				time.Sleep(1500 * time.Millisecond)
				return "", rebound.Permanent(errors.New("400 bad request"))
			}
			time.Sleep(time.Second)
			return "hedged answer", nil
		}
		chain := &fallback.Chain[string, string]{Targets: []fallback.Target[string, string]{{
			Name: "m", Call: call, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}},
		}}}
		res, err := chain.Do(t.Context(), "q")
		if err != nil {
			t.Fatal(err)
		}
		if s := res.Trail[0]; s.Err == nil || s.Verdict.Kind != rebound.KindPermanent {
			t.Errorf("the failed racer's step: err %v, verdict %v; want its verdict, permanent", s.Err, s.Verdict.Kind)
		}
	})
}
