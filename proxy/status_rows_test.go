package proxy

import (
	"math"
	"testing"
	"time"

	"github.com/rebound-go/rebound/cost"
)

// TestLatencySlotsBoundEachLatencyWithin19Percent: a latency falls in a
// slot whose bound is at least it and under 1.19 times it, from 100 µs to
// 100 s; shorter, negative and longer ones land in the first and last
// slots rather than out of the histogram.
func TestLatencySlotsBoundEachLatencyWithin19Percent(t *testing.T) {
	for d := latencyBase + 1; d < 100*time.Second; d = d*11/10 + 1 {
		i := latencySlot(d)
		if b := latencyBound(i); b < d || float64(b) > 1.19*float64(d) {
			t.Fatalf("%v: slot %d bound %v", d, i, b)
		}
	}
	for _, d := range []time.Duration{-time.Hour, 0, latencyBase} {
		if i := latencySlot(d); i != 0 {
			t.Errorf("%v: slot %d, want 0", d, i)
		}
	}
	if i := latencySlot(1<<63 - 1); i != latencySlots-1 {
		t.Errorf("the longest duration: slot %d, want %d", i, latencySlots-1)
	}
}

func TestQuantileOfAHistogram(t *testing.T) {
	h := make([]int64, latencySlots)
	h[3], h[10] = 98, 2
	if q := quantile(h, 100, 0.5); q != latencyBound(3) {
		t.Errorf("p50 %v, want %v", q, latencyBound(3))
	}
	if q := quantile(h, 100, 0.99); q != latencyBound(10) {
		t.Errorf("p99 %v, want %v", q, latencyBound(10))
	}
	if q := quantile(h, 0, 0.5); q != 0 {
		t.Errorf("empty: %v", q)
	}
}

// TestSplitTargetNamesUpstreamAndKey: a breaker's key names the upstream,
// and a pooled key's variable after a slash; a model's own slashes and
// colons stay in the model.
func TestSplitTargetNamesUpstreamAndKey(t *testing.T) {
	for target, want := range map[string][2]string{
		"openai:gpt-4o":                    {"openai", ""},
		"openai/KEY_2:gpt-4o":              {"openai", "KEY_2"},
		"openai/KEY_2:models/gemini:flash": {"openai", "KEY_2"},
		"openai:models/gemini-2.0":         {"openai", ""},
		"openai":                           {"openai", ""},
		"":                                 {"", ""},
	} {
		if up, key := splitTarget(target); up != want[0] || key != want[1] {
			t.Errorf("%q: %q %q, want %q", target, up, key, want)
		}
	}
}

// TestTokenTallyNeverWrapsNorGoesNegative: counts an upstream made up,
// however large or negative, leave every sum between 0 and
// math.MaxInt64 and the share read from the cache between 0 and 1.
func TestTokenTallyNeverWrapsNorGoesNegative(t *testing.T) {
	var tally tokenTally
	huge := cost.Usage{InputTokens: math.MaxInt64 / 2, CacheReadTokens: math.MaxInt64 / 2, CacheWriteTokens: math.MaxInt64 / 2,
		CacheWrite1hTokens: math.MaxInt64 / 2, OutputTokens: math.MaxInt64 / 2}
	for range 3 {
		tally.add(huge)
		tally.add(cost.Usage{InputTokens: -5, CacheReadTokens: -7, OutputTokens: math.MinInt64})
		tally.merge(tally)
	}
	if tally.input != math.MaxInt64 || tally.cacheRead != math.MaxInt64 || tally.cacheWrite != math.MaxInt64 || tally.output != math.MaxInt64 {
		t.Errorf("sums %+v, want each at math.MaxInt64", tally)
	}
	if j := tally.json(); j.CacheReadShare == nil || *j.CacheReadShare != 1 {
		t.Errorf("share %v, want 1", j.CacheReadShare)
	}
	var negative tokenTally
	negative.add(cost.Usage{InputTokens: -10, CacheReadTokens: -10})
	if negative != (tokenTally{}) || negative.json().CacheReadShare != nil {
		t.Errorf("negative counts counted: %+v", negative)
	}
}
