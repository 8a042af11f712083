package sim

import (
	"context"
	"errors"
	"math"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/cost"
)

// TestCostScenario runs five days of the default workload and checks what
// the issue asks of the recommended setup that this workload allows: a
// wasted share of at most 5%, a success rate at least naive's, and the cost
// per successful task in the $340 article's order, naive > backoff >
// classified > rebound. Every day is drawn alike, so five hold the
// month's shares (the month, in BENCHMARKS.md, is rebound bench
// --scenario cost); seeds 1 to 5 all meet the bars with five days.
func TestCostScenario(t *testing.T) {
	const seed = 1
	start := time.Now()
	r, err := RunCost(context.Background(), seed, CostWorkload{Days: 5}, nil)
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
		t.Errorf("cost per success not in the $340 article's order: %v %v %v %v",
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
	a, err := RunCost(context.Background(), 7, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunCost(context.Background(), 7, w, nil)
	c, _ := RunCost(context.Background(), 8, w, nil)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different results:\n%+v\n%+v", a, b)
	}
	if reflect.DeepEqual(a.Strategies, c.Strategies) {
		t.Fatal("a different seed gave the very same results")
	}
}

func TestCostWorkloadValidate(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, w := range []CostWorkload{
		{Days: -1}, {Days: MaxCostDays + 1}, {TasksPerDay: MaxCostTasksPerDay + 1}, {MaxCalls: MaxCostCalls + 1}, {MinCalls: -1},
		{PermanentRate: 2}, {RateLimitRate: 0.7, ServerErrorRate: 0.7}, {RateLimitRate: 0.99}, {InputTokens: -5},
		{OutputTokens: MaxCostTokens + 1}, {IncidentsPerDay: inf}, {IncidentsPerDay: nan}, {PermanentRate: nan},
		{RateLimitRate: nan}, {ServerErrorRate: inf}, {RateLimitRate: -inf}, {Primary: cost.Price{InputPerMillion: nan}},
		{Fallback: cost.Price{OutputPerMillion: -1}},
	} {
		err := w.Validate()
		if err == nil {
			t.Errorf("%+v accepted", w)
			continue
		}
		if _, err := RunCost(context.Background(), 1, w, nil); err == nil {
			t.Errorf("%+v: RunCost ran it", w)
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.HasPrefix(msg, "sim: ") {
			t.Errorf("%+v: %q is not one line", w, msg)
		}
	}
}

// TestCostNoFailures gives every failure rate and the incidents below
// zero, which means none (zero means the default): every call then
// succeeds at its first attempt, under every strategy.
func TestCostNoFailures(t *testing.T) {
	r, err := RunCost(context.Background(), 1, CostWorkload{Days: 1, TasksPerDay: 200,
		PermanentRate: -1, RateLimitRate: -1, ServerErrorRate: -1, IncidentsPerDay: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.FirstAttemptFailureRate != 0 {
		t.Errorf("first attempts failing: %v", r.FirstAttemptFailureRate)
	}
	for _, s := range r.Strategies {
		if s.SuccessRate != 1 || s.WastedShare != 0 || s.FallbackRequests != 0 || s.Requests < 3*s.Tasks || s.Requests > 5*s.Tasks {
			t.Errorf("%+v", s)
		}
	}
}

// TestCostMemoryIsBounded runs a short and a ten times longer month and
// compares the heap still live at the end of each simulated day: the month
// is streamed, so no per-task or per-call state may pile up as days grow.
func TestCostMemoryIsBounded(t *testing.T) {
	live := func(days int) uint64 {
		var peak uint64
		var m runtime.MemStats
		_, err := RunCost(context.Background(), 1, CostWorkload{Days: days, TasksPerDay: 500}, func(CostProgress) {
			runtime.GC()
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
		})
		if err != nil {
			t.Fatal(err)
		}
		return peak
	}
	short, long := live(2), live(20)
	t.Logf("live heap: %d KiB for 2 days, %d KiB for 20 days", short>>10, long>>10)
	if long > short+512<<10 {
		t.Errorf("the live heap grows with the days: %d KiB for 2 days, %d KiB for 20", short>>10, long>>10)
	}
}

// TestCostCanceled cancels a run at the end of its first simulated day:
// it stops with the context's error before another day is done.
func TestCostCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	calls := 0
	_, err := RunCost(ctx, 1, CostWorkload{Days: 200, TasksPerDay: 100}, func(p CostProgress) {
		calls++
		if calls == 1 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Fatalf("canceled after day 1: %v, %d days reported", err, calls)
	}
	if _, err := RunCost(ctx, 1, CostWorkload{Days: 36500}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled before the start: %v", err)
	}
}
