package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/cmd/rebound/internal/bench"
	"github.com/rebound-go/rebound/cmd/rebound/internal/sim"
)

func runBenchJSON(t *testing.T, seed string) bench.Report {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--json", "--seed", seed}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "[7/7] idempotency") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
	var r bench.Report
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("stdout is not one JSON report: %v", err)
	}
	if dec.More() {
		t.Fatal("stdout holds more than one JSON object")
	}
	return r
}

// TestBenchMeetsTheSeed runs the main job over loopback, twice with the
// same seed, and checks every row against the 429 article's figures.
func TestBenchMeetsTheSeed(t *testing.T) {
	t.Parallel()
	reports := make([]bench.Report, 2)
	t.Run("runs", func(t *testing.T) {
		for i := range reports {
			t.Run("", func(t *testing.T) {
				t.Parallel()
				reports[i] = runBenchJSON(t, "11")
			})
		}
	})
	if t.Failed() {
		return
	}
	r := reports[0]
	t.Logf("seed %d: %+v", r.Seed, r)

	if nr := r.NoRetry; nr.Calls != 200 || nr.ServerRequests != 200 || nr.Succeeded < 110 || nr.Succeeded > 150 {
		t.Errorf("no_retry %+v: want about 61-65%% of 200 (binomial noise aside), one request each", nr)
	}
	fj := r.FullJitter
	if fj.Succeeded < 192 || fj.ServerRequests > 340 || fj.Calls != 200 {
		t.Errorf("full_jitter %+v: want ≥ 96%% success with ≤ 1.7 requests per call", fj)
	}
	sum := 0
	for _, n := range fj.SuccessByAttempt {
		sum += n
	}
	if sum != fj.Succeeded || len(fj.SuccessByAttempt) != 4 || fj.SuccessByAttempt[0] < fj.SuccessByAttempt[1] {
		t.Errorf("success_by_attempt %v does not add up to %d", fj.SuccessByAttempt, fj.Succeeded)
	}
	if fj.TotalWaitMS <= 0 || fj.WallMS < fj.TotalWaitMS {
		t.Errorf("full_jitter waited %v ms in %v ms of wall time", fj.TotalWaitMS, fj.WallMS)
	}
	if r.Always400.ServerRequests != 1 {
		t.Errorf("always_400: %d requests, want 1", r.Always400.ServerRequests)
	}
	ra := r.RetryAfter
	// What rebound decided, exactly; the sleeps as they happened only
	// never shorter (a busy machine makes them longer).
	if ra.PlannedMS != 1000 || ra.WaitedMS < ra.PlannedMS || ra.CallMS < ra.WaitedMS {
		t.Errorf("retry_after %+v: want the 1 s hint honoured", ra)
	}
	if ra.CappedPlannedMS != 300 || ra.CappedWaitedMS < ra.CappedPlannedMS || ra.CappedCallMS < ra.CappedWaitedMS {
		t.Errorf("retry_after %+v: want the wait clamped to 300 ms", ra)
	}
	if h := r.Herd; h.Clients != 120 || h.NoJitterMaxIn10ms < 100 || h.FullJitterMaxIn10ms > 25 || h.ServerRequests != 480 {
		t.Errorf("herd %+v: want ≥ 100 in one window without jitter, ≤ 25 with full jitter", h)
	}
	if b := r.Budget; b.WaitedMS > 1500 || b.ServerRequests >= 20 || b.StopReason != "wait budget exhausted" {
		t.Errorf("budget %+v: want a stop within the 1500 ms budget, well before 20 attempts", b)
	}
	if id := r.Idempotency; id.NonIdempotentRequests != 1 || id.IdempotentRequests != 4 {
		t.Errorf("idempotency %+v: want 1 vs 4", id)
	}

	// Same seed, same counts.
	a, b := reports[0], reports[1]
	same := a.NoRetry == b.NoRetry && a.FullJitter.Succeeded == b.FullJitter.Succeeded &&
		a.FullJitter.ServerRequests == b.FullJitter.ServerRequests && a.FullJitter.TotalWaitMS == b.FullJitter.TotalWaitMS &&
		slices.Equal(a.FullJitter.SuccessByAttempt, b.FullJitter.SuccessByAttempt) && a.Herd == b.Herd &&
		a.Budget.ServerRequests == b.Budget.ServerRequests && a.Budget.WaitedMS == b.Budget.WaitedMS && a.Idempotency == b.Idempotency
	if !same {
		t.Errorf("same seed, different counts:\n%+v\n%+v", a, b)
	}
}

func TestBenchBadUsage(t *testing.T) {
	for _, args := range [][]string{{"bench", "--seed", "x"}, {"bench", "extra"}, {"bench", "--nope"}, {"frobnicate"}, {}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		if code != 2 || stdout.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q", args, code, stdout.String())
		}
		if len(args) > 0 && strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
			t.Errorf("%q: reason is not one line: %q", args, stderr.String())
		}
	}
}

func TestBenchCostScenario(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"bench", "--scenario", "cost", "--json", "--days", "2", "--seed", "4"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r struct {
		Seed       uint64 `json:"seed"`
		Strategies []struct {
			Name              string  `json:"name"`
			Requests          int     `json:"requests"`
			MonthlyCostUSD    float64 `json:"monthly_cost_usd"`
			WastedShare       float64 `json:"wasted_share"`
			SuccessRate       float64 `json:"success_rate"`
			CostPerSuccessUSD float64 `json:"cost_per_success_usd"`
		} `json:"strategies"`
	}
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&r); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON object: %v", err)
	}
	var names []string
	for _, s := range r.Strategies {
		names = append(names, s.Name)
		if s.Requests == 0 || s.MonthlyCostUSD <= 0 || s.WastedShare < 0 || s.WastedShare > 1 || s.SuccessRate <= 0 || s.CostPerSuccessUSD <= 0 {
			t.Errorf("implausible row %+v", s)
		}
	}
	if r.Seed != 4 || strings.Join(names, ",") != "naive,backoff,classified,rebound" {
		t.Fatalf("seed %d, strategies %v", r.Seed, names)
	}
	if !strings.Contains(stderr.String(), "[4/4] rebound: ") {
		t.Errorf("no progress on stderr: %q", stderr.String())
	}
	for _, args := range [][]string{{"bench", "--scenario", "nope"}, {"bench", "--scenario", "cost", "--days", "-1"}, {"bench", "--scenario", "cost", "--min-calls", "6"}} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 2 || strings.Count(strings.TrimSpace(errOut.String()), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}

// benchCmd runs "rebound bench" with args under ctx.
func benchCmd(ctx context.Context, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(ctx, append([]string{"bench"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestBenchForeignFlags gives the seed scenario each flag of the cost
// scenario: refused, with one line saying where the flag belongs.
func TestBenchForeignFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--days", "5"}, {"--tasks-per-day", "10"}, {"--min-calls", "1"}, {"--max-calls", "9"}, {"--input-tokens", "10"},
		{"--output-tokens", "10"}, {"--permanent-rate", "0.1"}, {"--rate-limit-rate", "0.1"}, {"--server-error-rate", "0.1"},
		{"--incidents-per-day", "2"}, {"--scenario", "seed", "--json", "--days", "5"},
	} {
		code, stdout, stderr := benchCmd(context.Background(), args...)
		name := args[len(args)-2]
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 ||
			!strings.Contains(stderr, name+" does not apply to the seed scenario: it belongs to --scenario cost") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
}

// TestBenchCostFlagsRefused gives the cost scenario's flags NaN,
// infinities, negative and absurd values: each refused with exit 2 and
// one line naming the flag, the value and what is wanted.
func TestBenchCostFlagsRefused(t *testing.T) {
	for _, tc := range []struct{ flag, value string }{
		{"rate-limit-rate", "NaN"}, {"rate-limit-rate", "Inf"}, {"rate-limit-rate", "-0.1"}, {"rate-limit-rate", "1.5"},
		{"permanent-rate", "NaN"}, {"permanent-rate", "-Inf"}, {"permanent-rate", "2"},
		{"server-error-rate", "NaN"}, {"server-error-rate", "+Inf"},
		{"incidents-per-day", "NaN"}, {"incidents-per-day", "Inf"}, {"incidents-per-day", "-1"},
		{"days", "0"}, {"days", "-1"}, {"days", "100000"}, {"days", "9223372036854775807"},
		{"tasks-per-day", "0"}, {"tasks-per-day", "1000000000"},
		{"min-calls", "0"}, {"min-calls", "-3"}, {"max-calls", "1000000"}, {"max-calls", "2"},
		{"input-tokens", "0"}, {"input-tokens", "-5"}, {"input-tokens", "1000000000000"},
		{"output-tokens", "0"}, {"output-tokens", "9000000000000000000"},
	} {
		code, stdout, stderr := benchCmd(context.Background(), "--scenario", "cost", "--"+tc.flag, tc.value)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "--"+tc.flag+" ") ||
			!strings.Contains(stderr, "want") {
			t.Errorf("--%s %s: exit %d, stdout %q, stderr %q", tc.flag, tc.value, code, stdout, stderr)
		}
	}
	code, _, stderr := benchCmd(context.Background(), "--scenario", "cost", "--rate-limit-rate", "0.6", "--server-error-rate", "0.6")
	if code != 2 || !strings.Contains(stderr, "--rate-limit-rate 0.6 and --server-error-rate 0.6") {
		t.Errorf("rates adding up to 1.2: exit %d, %q", code, stderr)
	}
}

// TestBenchCostZeroMeansNone wants a rate of 0 to mean none, not the
// default: with no failures of any kind, every first attempt succeeds.
func TestBenchCostZeroMeansNone(t *testing.T) {
	code, stdout, stderr := benchCmd(context.Background(), "--scenario", "cost", "--json", "--days", "1", "--tasks-per-day", "100",
		"--permanent-rate", "0", "--rate-limit-rate", "0", "--server-error-rate", "0", "--incidents-per-day", "0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r sim.CostReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.FirstAttemptFailureRate != 0 || r.Strategies[0].SuccessRate != 1 {
		t.Errorf("no failures asked, %v of first attempts failed, %v of tasks succeeded", r.FirstAttemptFailureRate, r.Strategies[0].SuccessRate)
	}
}

// TestBenchCostCanceled runs the cost scenario under a canceled context,
// as a signal leaves it: it stops, prints nothing on stdout, and exits 1
// with one line saying why.
func TestBenchCostCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, stdout, stderr := benchCmd(ctx, "--scenario", "cost", "--days", "36500")
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if code != 1 || stdout != "" || !strings.Contains(lines[len(lines)-1], "rebound bench: cost scenario stopped: context canceled") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}
