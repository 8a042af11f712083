package relay

import (
	"io"
	"sync/atomic"
	"time"
)

// watch guards a stream after content: it closes body when a read waits
// longer than stall for bytes, and judges the rate of content events over
// the time spent waiting for them.
type watch struct {
	body     io.Closer
	stall    time.Duration // zero: no stall bound
	start    time.Time
	timer    *time.Timer
	reading  atomic.Int64  // when the pending read began, from start; -1: none
	sleeping atomic.Bool   // the timer is not armed: the next read arms it
	reason   atomic.Uint32 // the Reason of a cut; zero: none

	// The rate floor, touched by Read only.
	minRate float64
	window  time.Duration
	waited  time.Duration // waiting for bytes in this window
	events  int           // content events before this window
}

func newWatch(body io.Closer, g Guards) *watch {
	w := &watch{body: body, start: time.Now(), stall: g.Stall, minRate: g.MinRate, window: g.Window}
	w.reading.Store(-1)
	if w.stall > 0 {
		w.sleeping.Store(true) // armed by the first read
		w.timer = time.AfterFunc(w.stall, w.check)
		w.timer.Stop()
	}
	return w
}

// read reads r under the watch.
func (w *watch) read(r io.Reader, p []byte) (int, error) {
	began := time.Since(w.start)
	w.reading.Store(int64(began))
	if w.timer != nil && w.sleeping.CompareAndSwap(true, false) {
		w.timer.Reset(w.stall)
	}
	n, err := r.Read(p)
	w.reading.Store(-1)
	if w.minRate > 0 {
		w.waited += time.Since(w.start) - began
	}
	return n, err
}

// check runs on the timer: it cuts a read that has waited stall, or arms
// the timer for when the pending read will have; with no read pending it
// sleeps until the next.
func (w *watch) check() {
	if w.cutBy() != 0 {
		return
	}
	w.sleeping.Store(true)
	r := w.reading.Load()
	if r < 0 || !w.sleeping.CompareAndSwap(true, false) {
		return // the next read arms it
	}
	silent := time.Since(w.start) - time.Duration(r)
	if silent >= w.stall {
		w.cut(Stalled)
		return
	}
	w.timer.Reset(w.stall - silent)
}

// tooSlow reports whether the window just ended with fewer content events
// than the floor; events is the count so far.
func (w *watch) tooSlow(events int) bool {
	if w.minRate <= 0 || w.waited < w.window {
		return false
	}
	slow := float64(events-w.events) < w.minRate*w.window.Seconds()
	w.waited, w.events = 0, events
	return slow
}

// cut closes the stream, once, for reason r.
func (w *watch) cut(r Reason) {
	if w.reason.CompareAndSwap(0, uint32(r)) {
		w.body.Close()
	}
}

func (w *watch) cutBy() Reason { return Reason(w.reason.Load()) }

func (w *watch) stop() {
	if w != nil && w.timer != nil {
		w.timer.Stop()
	}
}
