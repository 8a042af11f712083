package observe_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/testclock"
	"github.com/rebound-go/rebound/observe"
)

// observeCalls tells m of n calls to target, retried or not, each step
// after the one before on clk.
func observeCalls(m *observe.Monitor, clk *testclock.Clock, target string, n int, retried bool, step time.Duration) {
	attempt := 1
	if retried {
		attempt = 2
	}
	for range n {
		m.Observe(rebound.Event{Type: rebound.EventAttempt, Target: target, Attempt: attempt})
		clk.Add(step)
	}
}

// TestMonitorClocksBefore1970: a zero time.Time (an injected clock never
// set) and dates before 1970 work as any other: a rise is reported, once
// as above and once as a jump.
func TestMonitorClocksBefore1970(t *testing.T) {
	for _, start := range []time.Time{{}, time.Date(1969, 12, 31, 23, 58, 0, 0, time.UTC), time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC)} {
		clk := testclock.New(start)
		var kinds []observe.AlertKind
		m := &observe.Monitor{Window: time.Minute, Clock: clk, OnAlert: func(a observe.Alert) { kinds = append(kinds, a.Kind) }}
		observeCalls(m, clk, "search", 100, false, 600*time.Millisecond)
		observeCalls(m, clk, "search", 100, true, 600*time.Millisecond)
		if fmt.Sprint(kinds) != "[above jump]" {
			t.Fatalf("%v: alerts %v, want above and jump", start, kinds)
		}
		if rate, calls := m.Rate("search", clk.Now()); rate != 1 || calls < 90 {
			t.Fatalf("%v: rate %v over %d calls, want 1 over at least 90", start, rate, calls)
		}
	}
}

// TestMonitorClockGoesBack: a clock stepped back neither panics nor counts
// what was recorded at the later time.
func TestMonitorClockGoesBack(t *testing.T) {
	clk := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var kinds []observe.AlertKind
	m := &observe.Monitor{Window: time.Minute, Clock: clk, OnAlert: func(a observe.Alert) { kinds = append(kinds, a.Kind) }}
	observeCalls(m, clk, "search", 50, true, time.Second)
	clk.Add(-365 * 24 * time.Hour)
	observeCalls(m, clk, "search", 50, false, time.Second)
	if rate, calls := m.Rate("search", clk.Now()); rate != 0 || calls < 50 {
		t.Fatalf("rate %v over %d calls a year back, want 0 over the last minute's", rate, calls)
	}
	if fmt.Sprint(kinds) != "[above below]" {
		t.Fatalf("alerts %v", kinds)
	}
}

// TestMonitorMemoryIsBounded: 200 000 distinct targets, each called once,
// leave the Monitor holding no more than its bound.
func TestMonitorMemoryIsBounded(t *testing.T) {
	clk := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	m := &observe.Monitor{Clock: clk}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range 200_000 {
		m.Observe(rebound.Event{Type: rebound.EventAttempt, Target: fmt.Sprintf("target-%d", i), Attempt: 1})
		clk.Add(time.Millisecond)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
		t.Fatalf("200 000 targets retain %d MB", grew>>20)
	}
	if m.Len() != observe.DefaultMaxTargets {
		t.Fatalf("%d targets kept, want the bound of %d", m.Len(), observe.DefaultMaxTargets)
	}
}

// TestMonitorForgetsIdleTargets: when it is full, the Monitor forgets the
// target idle the longest, not a busy one, and a forgotten target starts
// afresh when it is called again.
func TestMonitorForgetsIdleTargets(t *testing.T) {
	clk := testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	var alerts []observe.Alert
	m := &observe.Monitor{MaxTargets: 100, Clock: clk, OnAlert: func(a observe.Alert) { alerts = append(alerts, a) }}
	observeCalls(m, clk, "search", 40, true, time.Second)
	observeCalls(m, clk, "busy", 40, false, time.Second)
	if len(alerts) != 1 || alerts[0].Kind != observe.AlertAbove || alerts[0].Target != "search" {
		t.Fatalf("alerts %v", alerts)
	}
	for i := range 99 {
		observeCalls(m, clk, fmt.Sprint("other-", i), 1, false, time.Millisecond)
		observeCalls(m, clk, "busy", 1, false, time.Millisecond)
	}
	if m.Len() != 100 {
		t.Fatalf("%d targets kept, want the bound of 100", m.Len())
	}
	if _, calls := m.Rate("search", clk.Now()); calls != 0 {
		t.Fatalf("the idle target still has %d calls in its window", calls)
	}
	if _, calls := m.Rate("busy", clk.Now()); calls < 100 {
		t.Fatalf("the busy target lost its window: %d calls", calls)
	}
	// Afresh: no AlertBelow for an AlertAbove it no longer remembers.
	alerts = nil
	observeCalls(m, clk, "search", 40, false, time.Second)
	if rate, calls := m.Rate("search", clk.Now()); len(alerts) != 0 || rate != 0 || calls != 40 {
		t.Fatalf("the forgotten target: alerts %v, rate %v over %d calls", alerts, rate, calls)
	}
}
