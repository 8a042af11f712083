package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestOverload runs every cell and checks the bars: rebound
// recovers no slower than none (and within 5 s of the trigger's end) and
// succeeds at least as often, with an amplification of at most 1.2; retry3
// is metastable in at least one cell. The bars ask nothing of budget, and
// of retry3 only one cell: each (strategy, cell) has a generator of its own
// (TestOverloadNarrowed), so none and rebound run in every cell, and retry3
// in the shortest trigger's, with the figures of the full run (rebound sim
// --scenario overload) in a third of its time.
func TestOverload(t *testing.T) {
	const seed = 1
	start := time.Now()
	r, err := RunOverload(context.Background(), seed, OverloadConfig{Strategies: []string{OverloadNone, OverloadRebound}})
	if err != nil {
		t.Fatal(err)
	}
	shortest := OverloadCell{Fraction: 0.5, Duration: 5 * time.Second}
	r3, err := RunOverload(context.Background(), seed, OverloadConfig{Strategies: []string{OverloadRetry3}, Cells: []OverloadCell{shortest}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d, %v", seed, time.Since(start))
	by := map[[3]any]OverloadResult{}
	for _, x := range append(r.Results, r3.Results...) {
		t.Logf("f=%.1f Δt=%2.0fs %-8s goodput %6.2f/s  amplification %5.2f  success %6.2f%%  recovered %-5v in %4.0f s",
			x.TriggerFraction, x.TriggerS, x.Strategy, x.Goodput, x.Amplification, 100*x.SuccessRate, x.Recovered, x.RecoveryS)
		by[[3]any{x.Strategy, x.TriggerFraction, x.TriggerS}] = x
	}
	metastable := false
	for _, c := range DefaultOverloadCells() {
		f, d := c.Fraction, c.Duration.Seconds()
		none, rb := by[[3]any{OverloadNone, f, d}], by[[3]any{OverloadRebound, f, d}]
		if none.Strategy == "" || rb.Strategy == "" {
			t.Fatalf("f=%v Δt=%v: no result for none or rebound", f, d)
		}
		// The aim: back at full goodput within 5 s of the trigger's end.
		if !rb.Recovered || rb.RecoveryS > 5 || (none.Recovered && rb.RecoveryS > none.RecoveryS) {
			t.Errorf("f=%v Δt=%v: rebound recovered %v in %v s, none %v in %v s", f, d, rb.Recovered, rb.RecoveryS, none.Recovered, none.RecoveryS)
		}
		if rb.SuccessRate < none.SuccessRate {
			t.Errorf("f=%v Δt=%v: rebound succeeded %.4f, none %.4f", f, d, rb.SuccessRate, none.SuccessRate)
		}
		if rb.Amplification > 1.2 {
			t.Errorf("f=%v Δt=%v: rebound amplification %.2f", f, d, rb.Amplification)
		}
		if r3, ok := by[[3]any{OverloadRetry3, f, d}]; ok {
			metastable = metastable || !r3.Recovered
		}
	}
	if !metastable {
		t.Error("retry3 recovered: the model shows no metastability")
	}
}

func TestOverloadIsDeterministic(t *testing.T) {
	cells := []OverloadCell{{Fraction: 0.5, Duration: time.Second}}
	a, err := RunOverload(context.Background(), 3, OverloadConfig{Cells: cells})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunOverload(context.Background(), 3, OverloadConfig{Cells: cells})
	for i := range a.Results {
		x, y := a.Results[i], b.Results[i]
		if x.Goodput != y.Goodput || x.Amplification != y.Amplification || x.RecoveryS != y.RecoveryS || x.SuccessRate != y.SuccessRate {
			t.Fatalf("same seed, different results: %+v vs %+v", x, y)
		}
	}
	if _, err := RunOverload(context.Background(), 3, OverloadConfig{Strategies: []string{"nope"}, Cells: cells}); err == nil {
		t.Fatal("an unknown strategy was accepted")
	}
	if _, err := RunOverload(context.Background(), 3, OverloadConfig{Cells: []OverloadCell{{Fraction: 2, Duration: time.Second}}}); err == nil {
		t.Fatal("a fraction of 2 was accepted")
	}
}

// TestOverloadNarrowed runs one strategy alone and wants its figures as in
// the run of them all: each (strategy, cell) has its own generator.
func TestOverloadNarrowed(t *testing.T) {
	cells := []OverloadCell{{Fraction: 0.5, Duration: time.Second}}
	all, err := RunOverload(context.Background(), 1, OverloadConfig{Cells: cells})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range OverloadStrategies() {
		one, err := RunOverload(context.Background(), 1, OverloadConfig{Strategies: []string{s}, Cells: cells})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(one.Results[0], all.Results[i]) {
			t.Errorf("%s alone: %+v\nin the full run: %+v", s, one.Results[0], all.Results[i])
		}
	}
}

func TestOverloadValidate(t *testing.T) {
	for _, cell := range []OverloadCell{
		{Fraction: math.NaN(), Duration: time.Second}, {Fraction: math.Inf(1), Duration: time.Second}, {Fraction: 0, Duration: time.Second},
		{Fraction: 0.5}, {Fraction: 0.5, Duration: -time.Second}, {Fraction: 0.5, Duration: MaxOverloadTrigger + 1},
	} {
		_, err := RunOverload(context.Background(), 1, OverloadConfig{Cells: []OverloadCell{cell}})
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v", cell, err)
		}
	}
}

// TestOverloadProgress wants a report after each simulated minute of a
// run and one with its result, and a run canceled at its first minute to
// stop before its second, although an hour-long trigger has hours to go.
func TestOverloadProgress(t *testing.T) {
	cell := OverloadCell{Fraction: 0.5, Duration: 10 * time.Second} // a run of 140 s
	var seen []OverloadProgress
	r, err := RunOverload(context.Background(), 1, OverloadConfig{Strategies: []string{OverloadNone}, Cells: []OverloadCell{cell},
		Progress: func(p OverloadProgress) { seen = append(seen, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[0].Done != time.Minute || seen[1].Done != 2*time.Minute || seen[0].Result != nil ||
		seen[2].Result == nil || !reflect.DeepEqual(*seen[2].Result, r.Results[0]) || seen[2].Done != seen[2].Of ||
		seen[2].Of != 140*time.Second || seen[2].Strategy != OverloadNone || seen[2].Cell != cell {
		t.Errorf("progress: %+v", seen)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, err = RunOverload(ctx, 1, OverloadConfig{Strategies: []string{OverloadRetry3}, Cells: []OverloadCell{{Fraction: 0.1, Duration: time.Hour}},
		Progress: func(OverloadProgress) {
			calls++
			cancel()
		}})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("canceled at the first minute: %v after %d reports", err, calls)
	}
}
