package sim

import (
	"context"
	"testing"
	"time"
)

// TestOverload runs every cell and checks the bars: rebound
// recovers no slower than none (and within 5 s of the trigger's end) and
// succeeds at least as often, with an amplification of at most 1.2; retry3
// is metastable in at least one cell.
func TestOverload(t *testing.T) {
	const seed = 1
	start := time.Now()
	r, err := RunOverload(context.Background(), seed, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d, %v", seed, time.Since(start))
	by := map[[3]any]OverloadResult{}
	for _, x := range r.Results {
		t.Logf("f=%.1f Δt=%2.0fs %-8s goodput %6.2f/s  amplification %5.2f  success %6.2f%%  recovered %-5v in %4.0f s",
			x.TriggerFraction, x.TriggerS, x.Strategy, x.Goodput, x.Amplification, 100*x.SuccessRate, x.Recovered, x.RecoveryS)
		by[[3]any{x.Strategy, x.TriggerFraction, x.TriggerS}] = x
	}
	metastable := false
	for _, c := range DefaultOverloadCells() {
		f, d := c.Fraction, c.Duration.Seconds()
		none, rb, r3 := by[[3]any{OverloadNone, f, d}], by[[3]any{OverloadRebound, f, d}], by[[3]any{OverloadRetry3, f, d}]
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
		metastable = metastable || !r3.Recovered
	}
	if !metastable {
		t.Error("retry3 recovered in every cell: the model shows no metastability")
	}
}

func TestOverloadIsDeterministic(t *testing.T) {
	cells := []OverloadCell{{Fraction: 0.5, Duration: 5 * time.Second}}
	a, err := RunOverload(context.Background(), 3, nil, cells)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunOverload(context.Background(), 3, nil, cells)
	for i := range a.Results {
		x, y := a.Results[i], b.Results[i]
		if x.Goodput != y.Goodput || x.Amplification != y.Amplification || x.RecoveryS != y.RecoveryS || x.SuccessRate != y.SuccessRate {
			t.Fatalf("same seed, different results: %+v vs %+v", x, y)
		}
	}
	if _, err := RunOverload(context.Background(), 3, []string{"nope"}, cells); err == nil {
		t.Fatal("an unknown strategy was accepted")
	}
	if _, err := RunOverload(context.Background(), 3, nil, []OverloadCell{{Fraction: 2, Duration: time.Second}}); err == nil {
		t.Fatal("a fraction of 2 was accepted")
	}
}
