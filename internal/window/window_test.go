package window

import (
	"testing"
	"time"
)

func TestEpochAndSlotRoundDown(t *testing.T) {
	const width = int64(time.Second)
	for _, c := range []struct {
		t     time.Time
		epoch int64
		slot  int
	}{
		{time.Unix(0, 0), 0, 0},
		{time.Unix(9, 999), 9, 9},
		{time.Unix(10, 0), 10, 0},
		{time.Unix(-1, 0), -1, 9},
		{time.Unix(0, -1), -1, 9},
		{time.Unix(-10, 0), -10, 0},
		{time.Unix(-11, 500), -11, 9},
	} {
		e := Epoch(c.t, width)
		if e != c.epoch || Slot(e, 10) != c.slot {
			t.Errorf("%v: epoch %d slot %d, want %d and %d", c.t, e, Slot(e, 10), c.epoch, c.slot)
		}
		if s := Slot(e, 10); s < 0 || s >= 10 {
			t.Errorf("%v: slot %d out of range", c.t, s)
		}
	}
	// Consecutive moments fall in consecutive epochs, either side of 1970,
	// and from the zero time.Time, which an injected clock may start at.
	for _, from := range []time.Time{time.Unix(-3, 0), {}} {
		for d := time.Duration(0); d < 6*time.Second; d += 100 * time.Millisecond {
			a, b := Epoch(from.Add(d), width), Epoch(from.Add(d+time.Second), width)
			if b != a+1 || Slot(a, 10) < 0 {
				t.Fatalf("%v: epochs %d then %d", from.Add(d), a, b)
			}
		}
	}
}
