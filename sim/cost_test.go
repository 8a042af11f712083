package sim

import (
	"reflect"
	"testing"
	"time"
)

// TestCostScenario runs the default month and checks what the issue asks
// of the recommended setup that this workload allows: a wasted share of at
// most 5%, a success rate at least naive's, and the cost per successful
// task in seed 002's order, naive > backoff > classified > rebound.
func TestCostScenario(t *testing.T) {
	const seed = 1
	start := time.Now()
	r, err := RunCost(seed, CostWorkload{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seed %d, %v, first-attempt failure rate %.2f%%", seed, time.Since(start), 100*r.FirstAttemptFailureRate)
	by := map[string]StrategyResult{}
	for _, s := range r.Strategies {
		t.Logf("%-10s %7d requests (%6d fallback) $%8.2f/month  wasted %5.2f%%  success %6.2f%%  $%.5f per success",
			s.Name, s.Requests, s.FallbackRequests, s.MonthlyCostUSD, 100*s.WastedShare, 100*s.SuccessRate, s.CostPerSuccessUSD)
		by[s.Name] = s
	}
	naive, backoff, classified, rb := by[StrategyNaive], by[StrategyBackoff], by[StrategyClassified], by[StrategyRebound]
	if rb.WastedShare > 0.05 {
		t.Errorf("rebound wastes %.2f%% of its spend", 100*rb.WastedShare)
	}
	if rb.SuccessRate < naive.SuccessRate || rb.SuccessRate < classified.SuccessRate {
		t.Errorf("rebound succeeds less often (%.4f) than naive (%.4f) or classified (%.4f)", rb.SuccessRate, naive.SuccessRate, classified.SuccessRate)
	}
	if !(naive.CostPerSuccessUSD > backoff.CostPerSuccessUSD && backoff.CostPerSuccessUSD > classified.CostPerSuccessUSD &&
		classified.CostPerSuccessUSD > rb.CostPerSuccessUSD) {
		t.Errorf("cost per success not in seed 002's order: %v %v %v %v",
			naive.CostPerSuccessUSD, backoff.CostPerSuccessUSD, classified.CostPerSuccessUSD, rb.CostPerSuccessUSD)
	}
	if naive.FallbackRequests != 0 || backoff.FallbackRequests != 0 || rb.FallbackRequests == 0 {
		t.Errorf("fallback requests: naive %d, backoff %d, rebound %d", naive.FallbackRequests, backoff.FallbackRequests, rb.FallbackRequests)
	}
	if f := r.FirstAttemptFailureRate; f < 0.05 || f > 0.07 {
		t.Errorf("first-attempt failure rate %.4f, the workload says about 6%%", f)
	}
}

func TestCostIsDeterministic(t *testing.T) {
	w := CostWorkload{Days: 2, TasksPerDay: 500}
	a, err := RunCost(7, w)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunCost(7, w)
	c, _ := RunCost(8, w)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
	if reflect.DeepEqual(a.Strategies, c.Strategies) {
		t.Fatal("a different seed gave the very same results")
	}
}

func TestCostWorkloadValidate(t *testing.T) {
	for _, w := range []CostWorkload{{Days: -1}, {PermanentRate: 2}, {RateLimitRate: 0.7, ServerErrorRate: 0.7}, {InputTokens: -5}, {IncidentsPerDay: -1}} {
		if _, err := RunCost(1, w); err == nil {
			t.Errorf("%+v accepted", w)
		}
	}
}
