package breaker

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/internal/window"
)

// windowBuckets is how many buckets the rolling window of the failure rate
// is cut into: it rolls a tenth of a Window at a time.
const windowBuckets = 10

// never is the epoch of a bucket that holds nothing yet: far from any
// epoch a clock gives, so that it is neither counted nor mistaken for a
// later one.
const never = math.MinInt64

// stripes spreads the counters of one bucket over cache lines, so that
// goroutines on different cores recording at once do not fight over one.
const stripes = 8

// clockEvery is how many successes wait on a stripe before one reads the
// clock. Reading it costs more than the rest of the closed path on some
// machines, so successes wait in a pending count until a clock reading (a
// failure's, or the clockEvery-th pending success's on a stripe) moves
// them into the window's current bucket. A success may so be counted late,
// and, when fewer than stripes·clockEvery successes arrive in a whole
// window, after the window has passed it: late errs towards not opening.
const clockEvery = 16

// line pads what follows it to a cache line of its own.
type line [64]byte

type stripe struct {
	successes, failures atomic.Int64
	_                   [48]byte
}

type bucket struct {
	epoch   atomic.Int64 // which stretch of time the counts belong to
	_       [56]byte
	stripes [stripes]stripe
}

// epochAt returns which bucket-long stretch of time t falls in, rounded
// down, so that times before 1970 get stretches of their own too.
func (b *Breaker) epochAt(t time.Time) int64 { return window.Epoch(t, b.bucketWidth) }

// flush moves all pending successes into the bucket of epoch.
func (b *Breaker) flush(epoch int64) {
	bk := b.bucket(epoch)
	for i := range b.pending {
		b.flushStripe(bk, uint32(i))
	}
}

// flushStripe moves stripe i's pending successes into bk.
func (b *Breaker) flushStripe(bk *bucket, i uint32) {
	if n := b.pending[i].successes.Swap(0); n != 0 {
		bk.stripes[i].successes.Add(n)
	}
}

// bucket returns the window's bucket for epoch, emptied first if it held
// another stretch of time: an older one, or a later one if the clock went
// back. A count that lands between the emptying and the new epoch is lost,
// which a rate over dozens of calls can afford.
func (b *Breaker) bucket(epoch int64) *bucket {
	bk := &b.window[window.Slot(epoch, windowBuckets)]
	if old := bk.epoch.Load(); old != epoch && bk.epoch.CompareAndSwap(old, epoch) {
		for j := range bk.stripes {
			bk.stripes[j].successes.Store(0)
			bk.stripes[j].failures.Store(0)
		}
	}
	return bk
}

// counts sums the window's calls and failures as of now.
func (b *Breaker) counts(now time.Time) (calls, failures int64) {
	epoch := b.epochAt(now)
	for i := range b.window {
		bk := &b.window[i]
		// A difference, not a comparison: a bucket's epoch may be never,
		// or far from now, and still be judged right where the
		// subtraction wraps.
		if d := epoch - bk.epoch.Load(); d < 0 || d >= windowBuckets {
			continue
		}
		for j := range bk.stripes {
			calls += bk.stripes[j].successes.Load() + bk.stripes[j].failures.Load()
			failures += bk.stripes[j].failures.Load()
		}
	}
	return calls, failures
}

func (b *Breaker) clearWindow() {
	for i := range b.window {
		b.window[i].epoch.Store(never)
		for j := range b.window[i].stripes {
			b.window[i].stripes[j].successes.Store(0)
			b.window[i].stripes[j].failures.Store(0)
		}
	}
	for i := range b.pending {
		b.pending[i].successes.Store(0)
	}
}
