// Package window maps moments to the slots of a rolling window: the retry
// budget's, the breaker's and the retry-rate monitor's. A window of n
// slots, each width nanoseconds long, keeps in slot Slot(Epoch(t, width), n)
// the counts of the stretch of time t falls in, and a slot whose epoch is
// not the current one's is stale.
//
// Both steps round down, so that moments before 1970 (an injected clock's
// zero time.Time among them) get stretches and slots of their own, as later
// ones do, instead of a negative index.
package window

import "time"

// Epoch returns which width-long stretch of time t falls in, counted from
// the Unix epoch and rounded down. width must be positive.
func Epoch(t time.Time, width int64) int64 {
	n := t.UnixNano()
	e := n / width
	if n%width < 0 {
		e--
	}
	return e
}

// Slot returns the slot of epoch in a ring of n slots, in [0, n).
func Slot(epoch int64, n int) int {
	i := int(epoch % int64(n))
	if i < 0 {
		i += n
	}
	return i
}
