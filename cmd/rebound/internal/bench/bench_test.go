package bench

import (
	"io"
	"strings"
	"testing"
	"time"
)

func TestMaxInWindow(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		in   []time.Duration
		want int
	}{
		{nil, 0},
		{[]time.Duration{1 * ms, 2 * ms, 9*ms + 900*time.Microsecond, 10 * ms, 25 * ms}, 3},
		{[]time.Duration{100 * ms, 100 * ms, 100 * ms}, 3},
	} {
		if got := maxInWindow(tc.in, 10*ms); got != tc.want {
			t.Errorf("%v: %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestTableSaysWhy: the table says why the wall clock of the full-jitter
// row exceeds its waiting (the attempts' own time), and why the budget row
// gives up before its budget (the next wait would not fit in it).
func TestTableSaysWhy(t *testing.T) {
	r := &Report{
		FullJitter: FullJitterRow{Calls: 200, MaxAttempts: 4, BaseMS: 20, MaxMS: 5000, Succeeded: 198, ServerRequests: 302,
			TotalWaitMS: 1345, WallMS: 1496, SuccessByAttempt: []int{126, 54, 12, 6}},
		Budget: BudgetRow{MaxAttempts: 20, WaitBudgetMS: 1500, GaveUpAfterMS: 847.5, WaitedMS: 839, ServerRequests: 4,
			StopReason: "wait budget exhausted"},
	}
	var b strings.Builder
	r.WriteTable(&b)
	table := b.String()
	t.Log(table)
	for _, want := range []string{
		"the attempts' own time", "151 ms for 302 requests", "1035 ms", // 2907 − 1872, the article's
		"the next wait would not fit in the 661 ms left of the 1500 ms",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("the table does not say %q", want)
		}
	}
}

// TestCacheScenarioKeepsThePromptCacheWarmThroughAPool: agents'
// conversations through rebound proxy's pool of three keys read from the
// provider's cache at least 90% as large a share of their input as
// through one key, no key takes more than half the requests, and each
// success costs less than through the keys taken in turn.
func TestCacheScenarioKeepsThePromptCacheWarmThroughAPool(t *testing.T) {
	r, err := RunCache(t.Context(), 1, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	r.WriteTable(&b)
	t.Log(b.String())
	naive, pool, one := r.Rows[0], r.Rows[1], r.Rows[2]
	if pool.CachedShare < 0.9*one.CachedShare {
		t.Errorf("the pool read %.3f of its input from the cache, one key %.3f: want at least 90%% of it", pool.CachedShare, one.CachedShare)
	}
	if pool.BusiestKeyShare > 0.5 {
		t.Errorf("the busiest key of the pool took %.2f of the requests, want at most half", pool.BusiestKeyShare)
	}
	if pool.CostPerSuccessUSD >= naive.CostPerSuccessUSD {
		t.Errorf("rebound's cost per success $%.5f, the naive client's $%.5f: want less", pool.CostPerSuccessUSD, naive.CostPerSuccessUSD)
	}
	if pool.Succeeded != r.Conversations*r.Turns {
		t.Errorf("rebound answered %d of %d turns", pool.Succeeded, r.Conversations*r.Turns)
	}
}
