package bench

import (
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
