package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestLegsOfARequestAreTheGapsBetweenItsSegments: requests through a
// proxy (port 8000) to an upstream (port 9000), each with its legs set
// apart by known times, come out as those times, phase by phase.
func TestLegsOfARequestAreTheGapsBetweenItsSegments(t *testing.T) {
	var b strings.Builder
	line := func(at float64, src, dst, n int) {
		fmt.Fprintf(&b, "%.6f IP 127.0.0.1.%d > 127.0.0.1.%d: Flags [P.], seq 1:%d, ack 1, win 512, length %d\n", at, src, dst, n+1, n)
	}
	// The harness's direct step: clients straight to the upstream.
	for i := range 6 {
		at := 1 + float64(i)*0.002
		line(at, 50000+i, 9000, 300)
		line(at+0.0001, 9000, 50000+i, 400)
	}
	// Two phases a second apart, 100 requests each, 2 ms apart: in 50 µs
	// (then 120 in the second), upstream 200 µs, out 30 µs, a second
	// segment out 10 µs after the first.
	for phase, in := range []float64{50e-6, 120e-6} {
		for i := range 100 {
			at := 2 + float64(phase) + float64(i)*0.002
			client, own := 40000+i%4, 41000+i%5
			line(at, client, 8000, 300)
			line(at+in, own, 9000, 250)
			line(at+in+1e-6, own, 9000, 50)
			line(at+in+200e-6, 9000, own, 400)
			line(at+in+230e-6, 8000, client, 300)
			line(at+in+240e-6, 8000, client, 100)
		}
	}
	line(9, 1, 2, 0) // unrelated, and lines tcpdump writes that are not segments:
	b.WriteString("reading from file run.pcap, link-type EN10MB\n")
	segs, err := parse(strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	upstream, proxies := listeners(segs)
	if upstream != 9000 || len(proxies) != 1 || proxies[0] != 8000 {
		t.Fatalf("upstream %d, proxies %v; want 9000 and [8000]", upstream, proxies)
	}
	phs := phases(segs, 8000)
	if len(phs) != 2 {
		t.Fatalf("%d phases; want 2", len(phs))
	}
	for i, want := range []float64{50, 120} {
		r := legsOf(phs[i], 8000, 9000)
		if r.requests != 99 && r.requests != 100 {
			t.Errorf("phase %d: %d requests; want 100", i+1, r.requests)
		}
		near := func(name string, got, want float64) {
			if got < want-1 || got > want+1 {
				t.Errorf("phase %d: %s %.1f µs; want %.0f", i+1, name, got, want)
			}
		}
		near("in", r.in, want)
		near("upstream", r.upstream, 200)
		near("out", r.out, 30)
		near("whole", r.whole, want+240)
		near("whole p99", r.wholeP99, want+240)
		if r.segments != [4]float64{1, 2, 1, 2} {
			t.Errorf("phase %d: segments %v; want [1 2 1 2]", i+1, r.segments)
		}
	}
}
