package firsttoken

import (
	"fmt"
	"testing"
	"time"

	"github.com/rebound-go/rebound/internal/lru"
)

func TestTimesPercentileOfTheRecentSamples(t *testing.T) {
	var ts Times
	if _, ok := ts.Percentile("a", 0.9, MinSamples); ok {
		t.Fatal("a percentile of no samples")
	}
	for i := range MinSamples - 1 {
		ts.Add("a", time.Duration(i+1)*time.Second, 64)
	}
	if _, ok := ts.Percentile("a", 0.9, MinSamples); ok {
		t.Fatalf("a percentile trusted from %d samples", MinSamples-1)
	}
	ts.Add("a", 16*time.Second, 64)
	if d, ok := ts.Percentile("a", 0.5, MinSamples); !ok || d != 8*time.Second {
		t.Errorf("median of 1..16 s = %v, %v; want 8s", d, ok)
	}
	if d, _ := ts.Percentile("a", 1, MinSamples); d != 16*time.Second {
		t.Errorf("the 100th percentile of 1..16 s = %v, want 16s", d)
	}
	// The ring keeps the last 64: 200 samples of 1 s push the old ones out
	// (the cached percentile is taken afresh after a few samples).
	for range 200 {
		ts.Add("a", time.Second, 64)
	}
	if d, _ := ts.Percentile("a", 1, MinSamples); d != time.Second {
		t.Errorf("after 200 samples of 1s, the largest kept is %v", d)
	}
	if _, ok := ts.Percentile("b", 0.5, 0); ok {
		t.Error("a percentile for a key never seen")
	}
}

func TestTimesKeepABoundedNumberOfKeys(t *testing.T) {
	var ts Times
	for i := range lru.DefaultSize + 100 {
		ts.Add(fmt.Sprint("host-", i), time.Second, 8)
	}
	if n := ts.keys.Len(); n != lru.DefaultSize {
		t.Errorf("%d keys kept, want %d", n, lru.DefaultSize)
	}
	if _, ok := ts.Percentile(fmt.Sprint("host-", lru.DefaultSize+99), 0.5, 1); !ok {
		t.Error("the latest key was not kept")
	}
}

func TestTimesKeepAtLeastOneSample(t *testing.T) {
	var ts Times
	for _, d := range []time.Duration{time.Second, 2 * time.Second} {
		ts.Add("a", d, 0)
	}
	if d, ok := ts.Percentile("a", 0.5, 1); !ok || d != 2*time.Second {
		t.Errorf("a ring asked to keep no samples gives %v, %v; want the latest, 2s", d, ok)
	}
}
