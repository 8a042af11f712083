package cost_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/rebound-go/rebound/cost"
)

func TestLedger(t *testing.T) {
	l := cost.Ledger{Prices: cost.Table{"big": {InputPerMillion: 2.5, OutputPerMillion: 10}}}
	in := cost.Usage{InputTokens: 2000}
	answer := cost.Usage{InputTokens: 2000, OutputTokens: 500}
	l.Add(cost.Task{Succeeded: true, Attempts: []cost.Attempt{{Target: "big", Usage: in}, {Target: "big", Usage: answer, Answered: true}}})
	l.Add(cost.Task{Attempts: []cost.Attempt{{Target: "big", Usage: in}, {Target: "unpriced", Usage: in}}})
	s := l.Summary()
	spent, wasted := 0.005+0.01+0.005, 0.005+0.005
	if s.Tasks != 2 || s.Succeeded != 1 || s.Attempts != 4 || math.Abs(s.Spent-spent) > 1e-12 || math.Abs(s.Wasted-wasted) > 1e-12 {
		t.Fatalf("%+v", s)
	}
	if math.Abs(s.CostPerSuccess()-spent) > 1e-12 || s.SuccessRate() != 0.5 || math.Abs(s.WastedShare()-wasted/spent) > 1e-12 {
		t.Fatalf("%v", s)
	}
	var empty cost.Summary
	if empty.WastedShare() != 0 || empty.SuccessRate() != 0 || empty.CostPerSuccess() != 0 {
		t.Fatal("an empty summary divides by zero")
	}
}

// What one task that needed a retry cost.
func ExampleLedger() {
	l := cost.Ledger{Prices: cost.Table{"gpt-x": {InputPerMillion: 2.5, OutputPerMillion: 10}}}
	l.Add(cost.Task{Succeeded: true, Attempts: []cost.Attempt{
		{Target: "gpt-x", Usage: cost.Usage{InputTokens: 2000}}, // a 503, billed its input
		{Target: "gpt-x", Usage: cost.Usage{InputTokens: 2000, OutputTokens: 500}, Answered: true},
	}})
	fmt.Println(l.Summary())
	// Output: 1 tasks, 100.0% succeeded, 2 attempts, $0.01 spent, 33.3% wasted, $0.0150 per success
}

// TestReport checks that reports from concurrent goroutines add up in the
// recorder of their context, and that a context without one ignores them.
func TestReport(t *testing.T) {
	cost.Report(context.Background(), cost.Usage{InputTokens: 1}) // no recorder: nothing to do, no panic
	var r cost.Recorder
	ctx := cost.WithRecorder(context.Background(), &r)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				cost.Report(ctx, cost.Usage{InputTokens: 2, OutputTokens: 1})
			}
		})
	}
	wg.Wait()
	if got, want := r.Usage(), (cost.Usage{InputTokens: 1600, OutputTokens: 800}); got != want {
		t.Errorf("Usage() = %+v, want %+v", got, want)
	}
}
