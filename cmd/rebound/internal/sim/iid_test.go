package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

// iidMoments returns the mean and variance of the attempts a call makes
// when each of at most n attempts fails with probability p: the attempts
// A ≥ k with probability pᵏ⁻¹ for k = 1…n, so E[A] = Σ pᵏ⁻¹ and
// E[A²] = Σ (2k − 1) pᵏ⁻¹.
func iidMoments(p float64, n int) (mean, variance float64) {
	var m2 float64
	for k := 1; k <= n; k++ {
		tail := math.Pow(p, float64(k-1))
		mean += tail
		m2 += float64(2*k-1) * tail
	}
	return mean, max(0, m2-mean*mean)
}

// bernstein returns how far the mean of n independent draws of a variable
// with the given variance, never further than b from its mean, strays from
// that mean with probability at most delta, by Bernstein's inequality:
// P(|mean − μ| ≥ t) ≤ 2 exp(−n t² / (2 variance + 2 b t / 3)). Where draws
// are not rare events this is √(2 ln(2/delta)) standard errors; where they
// are (a call that fails at p = 0.05 with four attempts), the b term keeps
// a handful of events from looking like many standard errors.
func bernstein(variance, b float64, n int, delta float64) float64 {
	l := math.Log(2 / delta)
	a := b * l / (3 * float64(n))
	return a + math.Sqrt(a*a+2*variance*l/float64(n))
}

// TestIIDMatchesTheory runs the default experiment and wants every
// measured figure within a few standard errors of theory: the bound of
// bernstein at a chance of 10⁻⁶ per figure (5.4 standard errors for
// frequent events), from the binomial variance of success and the
// variance of the truncated geometric number of attempts.
func TestIIDMatchesTheory(t *testing.T) {
	const delta = 1e-6
	r, err := RunIID(context.Background(), 1, IIDConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Scenario != "iid" || r.Seed != 1 || len(r.Results) != len(DefaultIIDAttempts())*len(DefaultIIDRates()) {
		t.Fatalf("report header %q seed %d, %d results", r.Scenario, r.Seed, len(r.Results))
	}
	for i, res := range r.Results {
		n, p := DefaultIIDAttempts()[i/len(DefaultIIDRates())], DefaultIIDRates()[i%len(DefaultIIDRates())]
		if res.MaxAttempts != n || res.P != p {
			t.Fatalf("result %d is (%d, %v), want (%d, %v)", i, res.MaxAttempts, res.P, n, p)
		}
		success := 1 - math.Pow(p, float64(n))
		load, loadVar := iidMoments(p, n)
		if math.Abs(res.SuccessBound-success) > 1e-12 || math.Abs(res.LoadBound-load) > 1e-12 {
			t.Errorf("(%d, %v): bounds %v and %v, want %v and %v", n, p, res.SuccessBound, res.LoadBound, success, load)
		}
		successVar := success * (1 - success)
		se := func(variance float64) float64 { return math.Sqrt(variance / DefaultIIDTrials) }
		if d := math.Abs(res.Success - success); d > bernstein(successVar, 1, DefaultIIDTrials, delta)+1e-12 {
			t.Errorf("(%d, %v): success %.6f, theory %.6f: %.1f standard errors of %.2g off",
				n, p, res.Success, success, d/se(successVar), se(successVar))
		}
		if d := math.Abs(res.Load - load); d > bernstein(loadVar, float64(n-1), DefaultIIDTrials, delta)+1e-12 {
			t.Errorf("(%d, %v): load %.5f, theory %.5f: %.1f standard errors of %.2g off",
				n, p, res.Load, load, d/se(loadVar), se(loadVar))
		}
	}
}

func TestIIDTheory(t *testing.T) {
	for _, tc := range []struct {
		p                   float64
		attempts            int
		wantSuccess, wantLd float64
	}{
		{0, 1, 1, 1},
		{0, 6, 1, 1},
		{0.5, 1, 0.5, 1},
		{0.5, 2, 0.75, 1.5},
		{0.35, 3, 1 - 0.35*0.35*0.35, 1 + 0.35 + 0.35*0.35},
		{1, 3, 0, 3},
	} {
		s, l := IIDTheory(tc.p, tc.attempts)
		if math.Abs(s-tc.wantSuccess) > 1e-12 || math.Abs(l-tc.wantLd) > 1e-12 {
			t.Errorf("IIDTheory(%v, %d) = %v, %v; want %v, %v", tc.p, tc.attempts, s, l, tc.wantSuccess, tc.wantLd)
		}
	}
}

// TestIIDStopsWhereThePolicySays checks the extremes, where rebound's
// retry decisions alone give the figures: a call that always fails makes
// exactly MaxAttempts attempts, one that never fails makes one.
func TestIIDStopsWhereThePolicySays(t *testing.T) {
	r, err := RunIID(context.Background(), 3, IIDConfig{Attempts: []int{1, 3, 6}, Rates: []float64{0, 1}, Trials: 500})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r.Results {
		want := IIDResult{MaxAttempts: res.MaxAttempts, P: res.P, Success: 1, SuccessBound: 1, Load: 1, LoadBound: 1}
		if res.P == 1 {
			want.Success, want.SuccessBound = 0, 0
			want.Load, want.LoadBound = float64(res.MaxAttempts), float64(res.MaxAttempts)
		}
		if res != want {
			t.Errorf("got %+v, want %+v", res, want)
		}
	}
}

func TestIIDIsDeterministic(t *testing.T) {
	c := IIDConfig{Attempts: []int{2, 4}, Rates: []float64{0.1, 0.4}, Trials: 3000}
	a, err := RunIID(context.Background(), 7, c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunIID(context.Background(), 7, c)
	other, _ := RunIID(context.Background(), 8, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
	if reflect.DeepEqual(a.Results, other.Results) {
		t.Fatal("a different seed gave the very same results")
	}
	// A cell's figures do not depend on which other cells run.
	narrow, _ := RunIID(context.Background(), 7, IIDConfig{Attempts: []int{4}, Rates: []float64{0.4}, Trials: 3000})
	if len(narrow.Results) != 1 || narrow.Results[0] != a.Results[3] {
		t.Fatalf("4 attempts at 0.4 alone: %+v, within the wider run: %+v", narrow.Results, a.Results[3])
	}
}

func TestIIDConfigErrors(t *testing.T) {
	for _, c := range []IIDConfig{
		{Attempts: []int{3, 0}},
		{Rates: []float64{0.1, -0.1}},
		{Rates: []float64{1.5}},
		{Rates: []float64{math.NaN()}},
		{Trials: -1},
	} {
		_, err := RunIID(context.Background(), 1, c)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: error %v, want one line", c, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunIID(ctx, 1, IIDConfig{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled run: %v", err)
	}
}

func TestIIDProgressAndCharts(t *testing.T) {
	var seen []IIDResult
	r, err := RunIID(context.Background(), 2, IIDConfig{Attempts: []int{1, 3}, Rates: []float64{0.2, 0.3}, Trials: 100,
		Progress: func(res IIDResult) { seen = append(seen, res) }})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, r.Results) || len(seen) != 4 {
		t.Errorf("progress saw %+v, report has %+v", seen, r.Results)
	}
	charts := r.Charts()
	if len(charts) != 2 {
		t.Fatalf("%d charts, want success and load", len(charts))
	}
	for _, c := range charts {
		// Per MaxAttempts a dashed theory curve and the measured dots,
		// then the legend's key for theory.
		if len(c.Series) != 5 {
			t.Fatalf("%s: %d series", c.Title, len(c.Series))
		}
		for i := 0; i < 4; i += 2 {
			theory, measured := c.Series[i], c.Series[i+1]
			if !theory.Dashed || !measured.DotsOnly || theory.Color != measured.Color || len(measured.Points) != 2 {
				t.Errorf("%s: series %d and %d: %+v, %+v", c.Title, i, i+1, theory, measured)
			}
			if first, last := theory.Points[0], theory.Points[len(theory.Points)-1]; first.X != 0.2 || last.X != 0.3 {
				t.Errorf("%s: theory runs from %v to %v", c.Title, first.X, last.X)
			}
		}
		if key := c.Series[4]; key.Name != "theory" || len(key.Points) != 0 || !key.Dashed {
			t.Errorf("%s: legend key %+v", c.Title, key)
		}
	}
}
