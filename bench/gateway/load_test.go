package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
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

func TestMaxRateIsTheMedianSearchWithItsSpread(t *testing.T) {
	for _, c := range []struct {
		found           []int
		rate, low, high int
		spread          float64
	}{
		{nil, 0, 0, 0, 0},
		{[]int{4000}, 4000, 4000, 4000, 0},
		{[]int{6000, 1875, 4000}, 4000, 1875, 6000, 0.53125},
		{[]int{1000, 3000}, 2000, 1000, 3000, 0.5},
		{[]int{0, 0, 500}, 0, 0, 500, 0},
	} {
		m := newMaxRate("rebound", plain, c.found)
		if m.Rate != c.rate || m.Low != c.low || m.High != c.high || m.spread() != c.spread || len(m.Searches) != len(c.found) {
			t.Errorf("%v: rate %d, lowest %d, highest %d, spread %v; want %d, %d, %d, %v", c.found, m.Rate, m.Low, m.High, m.spread(), c.rate, c.low, c.high, c.spread)
		}
	}
}

func TestReportSetsTargetsSideBySide(t *testing.T) {
	r := report{Rounds: 1, Searches: 3, Nginx: "nginx/1.22.1"}
	for i, tg := range []string{"direct", "hop", "nginx", "rebound"} {
		for _, m := range []mode{plain, streamed} {
			r.Points = append(r.Points, roundPoint{point: point{Target: tg, Mode: m, Rate: 500, P50: time.Duration(i+1) * time.Millisecond, P99: 10 * time.Millisecond}})
			r.MaxRates = append(r.MaxRates, newMaxRate(tg, m, []int{1000 * len(tg), 900 * len(tg), 1100 * len(tg)}))
		}
	}
	r.summarize([]target{{name: "direct"}, {name: "hop"}, {name: "nginx"}, {name: "rebound"}}, []mode{plain, streamed}, []int{500})
	var b strings.Builder
	r.writeTables(&b)
	out := b.String()
	for _, want := range []string{"nginx/1.22.1", "median of 3 searches", "±10%", "side by side",
		"nginx  2000 µs / 0 µs  2000 µs / 0 µs  5000  5000", "rebound  3000 µs / 0 µs  3000 µs / 0 µs  7000  7000",
		"against the hop", "nginx 2.00 - 2.00 - 1.67 1.67", "rebound 3.00 - 3.00 - 2.33 2.33"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the tables lack %q:\n%s", want, out)
		}
	}
}

// TestInterleavedTakesTurns runs two targets in turns and checks that each
// got its share of the rate, in more than one turn, and that their turns
// alternated: the first target's requests did not all come before the
// second's.
func TestInterleavedTakesTurns(t *testing.T) {
	var mu sync.Mutex
	var order []string // the target of each request, as they came
	serve := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		}))
	}
	a, b := serve("a"), serve("b")
	defer a.Close()
	defer b.Close()
	const rate, d, slice = 100, 600 * time.Millisecond, 200 * time.Millisecond
	points := interleaved(t.Context(), []target{{name: "a", url: a.URL}, {name: "b", url: b.URL}}, plain, rate, d, slice)
	if len(points) != 2 || points[0].Target != "a" || points[1].Target != "b" {
		t.Fatalf("points %+v, want a's then b's", points)
	}
	want := int(rate * d / time.Second)
	for _, p := range points {
		if p.Errors > 0 || p.Duration != d || p.Requests < want/2 || p.Requests > want+3 {
			t.Errorf("%s: %d requests, %d errors (%s) in %s; want about %d, none, in %s", p.Target, p.Requests, p.Errors, p.FirstError, p.Duration, want, d)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	turns := 1
	for i := 1; i < len(order); i++ {
		if order[i] != order[i-1] {
			turns++
		}
	}
	// Three turns each; the drain's request after a turn may land in the
	// next one's, but not merge two.
	if turns < 6 {
		t.Errorf("%d turns, want at least 6: %v", turns, order)
	}
}
