package main

import (
	"slices"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	var hundred []time.Duration
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, time.Duration(i))
	}
	for _, c := range []struct {
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{nil, 0.5, 0},
		{[]time.Duration{7}, 0.99, 7},
		{[]time.Duration{1, 2}, 0.5, 1},
		{[]time.Duration{1, 2, 3}, 0.5, 2},
		{hundred, 0.50, 50},
		{hundred, 0.99, 99},
		{hundred, 1, 100},
		{hundred, 0, 1},
	} {
		if got := percentile(c.sorted, c.q); got != c.want {
			t.Errorf("percentile(%d values, %v) = %v, want %v", len(c.sorted), c.q, got, c.want)
		}
	}
}

func TestMedianLeavesItsInputAlone(t *testing.T) {
	values := []time.Duration{5, 1, 4, 2}
	if got := median(values); got != 3 {
		t.Errorf("median of 5,1,4,2 = %v, want 3", got)
	}
	if !slices.Equal(values, []time.Duration{5, 1, 4, 2}) {
		t.Errorf("median reordered its input: %v", values)
	}
	if got := median([]time.Duration{-3, 9, 1}); got != 1 {
		t.Errorf("median of -3,9,1 = %v, want 1", got)
	}
	if got := median(nil); got != 0 {
		t.Errorf("median of nothing = %v, want 0", got)
	}
}

// TestSearchMaxFindsTheLimitWithinATenth checks the search against targets
// whose true limit is known, and that it stays within a bounded count of
// steps.
func TestSearchMaxFindsTheLimitWithinATenth(t *testing.T) {
	for _, limit := range []int{0, 120, 499, 500, 777, 1999, 3000, 9000, 31999, 32000, 100000} {
		var tried []int
		got := searchMax(500, 32000, func(rate int) bool {
			tried = append(tried, rate)
			return rate <= limit
		})
		want := min(limit, 32000)
		if got > want || float64(got) < 0.9*float64(want)-50 {
			t.Errorf("limit %d: searchMax = %d, want at most %d and within a tenth (tried %v)", limit, got, want, tried)
		}
		if len(tried) > 12 {
			t.Errorf("limit %d: %d steps, want at most 12: %v", limit, len(tried), tried)
		}
	}
}

func TestSustainedNeedsEveryRequestSentAndAnswered(t *testing.T) {
	ok := point{Rate: 1000, Duration: 2 * time.Second, Requests: 2000, P99: 10 * time.Millisecond}
	if !ok.sustained(50 * time.Millisecond) {
		t.Errorf("%+v not sustained", ok)
	}
	for name, p := range map[string]point{
		"an error":      {Rate: 1000, Duration: 2 * time.Second, Requests: 2000, Errors: 1, P99: time.Millisecond},
		"p99 at limit":  {Rate: 1000, Duration: 2 * time.Second, Requests: 2000, P99: 50 * time.Millisecond},
		"requests lost": {Rate: 1000, Duration: 2 * time.Second, Requests: 1800, P99: time.Millisecond},
		"no requests":   {Rate: 1000, Duration: 2 * time.Second},
	} {
		if p.sustained(50 * time.Millisecond) {
			t.Errorf("%s: %+v sustained", name, p)
		}
	}
}
