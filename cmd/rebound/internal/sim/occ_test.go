package sim

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
)

// TestOCCMatchesBrooker runs every strategy at N = 100 over 25 trials and
// wants the mean writes and completion time within 10% of Brooker's
// published figures, with every client succeeding. (Over 25 trials the
// means of seeds 1 to 5 and 2015 stray at most 6.3% from his; the
// default 100 trials are rebound sim --scenario occ's.)
func TestOCCMatchesBrooker(t *testing.T) {
	const n, trials = 100, 25
	start := time.Now()
	r, err := RunOCC(context.Background(), 2015, OCCConfig{Clients: []int{n}, Trials: trials})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d trials of every strategy at N = %d in %v", r.Trials, n, time.Since(start))
	if r.Scenario != "occ" || r.Seed != 2015 || r.Trials != trials || len(r.Results) != len(OCCStrategies()) {
		t.Fatalf("report header %q seed %d trials %d, %d results", r.Scenario, r.Seed, r.Trials, len(r.Results))
	}
	for i, res := range r.Results {
		if res.Strategy != OCCStrategies()[i] || res.Clients != n {
			t.Errorf("result %d is %s at %d, want %s at %d", i, res.Strategy, res.Clients, OCCStrategies()[i], n)
		}
		pub, ok := OCCPublished(res.Strategy, n)
		if !ok {
			t.Fatalf("no published figure for %s at %d", res.Strategy, n)
		}
		dw := res.Writes/pub.Writes - 1
		dc := res.CompletionMS/float64(pub.Completion.Milliseconds()) - 1
		t.Logf("%-12s writes %7.1f (published %4.0f, %+5.1f%%)  completion %6.2f s (published %5.2f s, %+5.1f%%)",
			res.Strategy, res.Writes, pub.Writes, 100*dw, res.CompletionMS/1000, pub.Completion.Seconds(), 100*dc)
		if dw < -0.1 || dw > 0.1 {
			t.Errorf("%s: %.1f writes, %+.1f%% off the published %.0f", res.Strategy, res.Writes, 100*dw, pub.Writes)
		}
		if dc < -0.1 || dc > 0.1 {
			t.Errorf("%s: completion %.0f ms, %+.1f%% off the published %v", res.Strategy, res.CompletionMS, 100*dc, pub.Completion)
		}
		if res.Succeeded != n {
			t.Errorf("%s: %v of %d clients succeeded on average", res.Strategy, res.Succeeded, n)
		}
	}
}

// TestOCCBounds checks the lower bounds every run must respect: at least
// one write per client, and successive successes at least one round trip
// apart.
func TestOCCBounds(t *testing.T) {
	r, err := RunOCC(context.Background(), 1, OCCConfig{Clients: []int{1, 2, 30}, Trials: 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r.Results {
		n := float64(res.Clients)
		if res.Succeeded != n || res.Writes < n {
			t.Errorf("%+v: want every client to succeed, with at least one write each", res)
		}
		// Four hops of |N(10 ms, 2 ms)| for the first client, then about
		// two more per later success.
		if low := 20*n + 10; res.CompletionMS < low {
			t.Errorf("%+v: finished before %.0f ms", res, low)
		}
		if res.Clients == 1 && res.Writes != 1 {
			t.Errorf("%+v: a lone client's first write cannot fail", res)
		}
	}
}

// TestOCCTrialsDefaultToAHundred: a config without Trials runs
// DefaultOCCTrials of each cell.
func TestOCCTrialsDefaultToAHundred(t *testing.T) {
	r, err := RunOCC(context.Background(), 1, OCCConfig{Strategies: []string{OCCNone}, Clients: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Trials != DefaultOCCTrials || DefaultOCCTrials != 100 {
		t.Errorf("%d trials, DefaultOCCTrials %d: want 100", r.Trials, DefaultOCCTrials)
	}
}

func TestOCCIsDeterministic(t *testing.T) {
	c := OCCConfig{Clients: []int{10, 40}, Trials: 10}
	a, err := RunOCC(context.Background(), 7, c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunOCC(context.Background(), 7, c)
	other, _ := RunOCC(context.Background(), 8, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
	if reflect.DeepEqual(a.Results, other.Results) {
		t.Fatal("a different seed gave the very same results")
	}
	// A cell's figures do not depend on which other cells run.
	narrow, _ := RunOCC(context.Background(), 7, OCCConfig{Strategies: []string{OCCFull}, Clients: []int{40}, Trials: 10})
	var want OCCResult
	for _, res := range a.Results {
		if res.Strategy == OCCFull && res.Clients == 40 {
			want = res
		}
	}
	if len(narrow.Results) != 1 || narrow.Results[0] != want {
		t.Fatalf("full at 40 alone: %+v, within the wider run: %+v", narrow.Results, want)
	}
}

// TestOCCPolicyIsBrookers drives each strategy's Policy through
// rebound.Run, as the simulation does, under a clock that never sleeps,
// and checks the waits its observer hears against Brooker's formulas:
// base 5 ms, cap 2 s, exponential min(cap, base·2ⁿ).
func TestOCCPolicyIsBrookers(t *testing.T) {
	const (
		base    = 5 * time.Millisecond
		ceiling = 2 * time.Second
		retries = 40
	)
	brooker := func(n int) time.Duration { return min(ceiling, base<<n) }
	ctx := rebound.WithClock(context.Background(), NewClock(time.Date(2015, 3, 4, 0, 0, 0, 0, time.UTC)))
	for _, s := range OCCStrategies() {
		p, err := OCCPolicy(s, rand.New(rand.NewPCG(1, 2)))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		var waits []time.Duration
		p.Observer = rebound.ObserverFunc(func(e rebound.Event) {
			if e.Type == rebound.EventRetry {
				waits = append(waits, e.Wait)
			}
		})
		attempts := 0
		err = rebound.Run(ctx, p, func(context.Context) error {
			if attempts++; attempts <= retries {
				return errConflict
			}
			return nil
		})
		if err != nil || len(waits) != retries {
			t.Fatalf("%s: %v after %d retries, want success after %d", s, err, len(waits), retries)
		}
		prev := base
		for i, wait := range waits {
			n := i + 1
			var lo, hi time.Duration
			switch s {
			case OCCNone:
			case OCCExponential:
				lo, hi = brooker(n), brooker(n)
			case OCCFull:
				hi = brooker(n)
			case OCCEqual:
				lo, hi = brooker(n)/2, brooker(n)
			case OCCDecorrelated:
				lo, hi = base, min(ceiling, 3*prev)
				prev = wait
			}
			if wait < lo || wait > hi {
				t.Errorf("%s: retry %d waits %v, want within [%v, %v]", s, n, wait, lo, hi)
			}
		}
	}
	if _, err := OCCPolicy("linear", nil); err == nil {
		t.Error("an unknown strategy gave a policy")
	}
}

func TestOCCConfigErrors(t *testing.T) {
	for _, c := range []OCCConfig{
		{Strategies: []string{"full", "fancy"}},
		{Clients: []int{10, 0}},
		{Trials: -1},
	} {
		_, err := RunOCC(context.Background(), 1, c)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: error %v, want one line", c, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunOCC(ctx, 1, OCCConfig{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled run: %v", err)
	}
}

func TestOCCProgressAndPublished(t *testing.T) {
	var seen []OCCResult
	r, err := RunOCC(context.Background(), 3, OCCConfig{Strategies: []string{OCCNone, OCCEqual}, Clients: []int{5}, Trials: 3,
		Progress: func(res OCCResult) { seen = append(seen, res) }})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(seen, r.Results) || len(seen) != 2 || seen[0].Strategy != OCCNone {
		t.Errorf("progress saw %+v, report has %+v", seen, r.Results)
	}
	if f, ok := OCCPublished(OCCExponential, 190); !ok || f.Writes != 5154 || f.Completion != 100900*time.Millisecond {
		t.Errorf("published exponential at 190: %+v %v", f, ok)
	}
	if _, ok := OCCPublished(OCCFull, 11); ok {
		t.Error("a published figure for 11 clients")
	}
}
