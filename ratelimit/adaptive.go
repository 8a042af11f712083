package ratelimit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/queue"
)

// ErrQueueFull is the error of a call that found the Adaptive queue of
// its Priority full.
var ErrQueueFull = errors.New("ratelimit: too many calls waiting")

// DefaultMaxPassOver is AdaptiveConfig.MaxPassOver's default: a Batch
// call waits for at most this many Interactive calls to be granted a slot
// ahead of it, so a batch keeps at least a ninth of the slots that free
// while both wait, and interactive calls are first until they ask for
// about 8/9 of the limit. In rebound sim --scenario priority (interactive
// calls at 60% of the provider's capacity, a batch of 3000 requests 64 at
// a time on top) interactive p99 is 3.28 s with it against 3.31 s with no
// batch, and the batch ends in 539 s (525 s with one FIFO queue, where
// interactive p99 is 13.9 s). A bound of 1 lets a batch take every other
// slot, more than the interactive calls leave: their p99 grows to 73 s;
// 2 gives 3.91 s and 4 3.39 s; beyond 8 nothing changes there.
const DefaultMaxPassOver = 8

// AdaptiveConfig tunes an Adaptive limit. Its zero value is a sensible one
// for an LLM API; each field documents its default.
type AdaptiveConfig struct {
	// Initial, Min and Max bound the number of calls in flight. Zero means
	// 20, 1 and 1000.
	Initial, Min, Max int
	// Decrease multiplies the limit on a congestion signal. Zero means
	// 0.7 (the AWS SDK's adaptive mode cuts to 0.7 too).
	Decrease float64
	// QueueSize bounds how many calls of each Priority may wait, so a
	// batch that fills its queue never turns interactive calls away.
	// Zero means 10 000.
	QueueSize int
	// MaxPassOver bounds how long a waiting Batch call can be passed
	// over: once this many Interactive calls have been granted a slot
	// while Batch calls wait, since the last Batch grant, the oldest
	// Batch call goes next. Zero means DefaultMaxPassOver. The bound
	// counts grants rather than time because only a count is a promise:
	// no call goes until a slot frees, and a count says what share of
	// the freed slots a batch keeps however long the calls take.
	MaxPassOver int
	// Clock is the time the limit goes by: how recent the fastest
	// latency is, and how long since the last cut. Nil means the real
	// clock; a simulation gives it a virtual one. Only Now is used: a
	// waiting call waits for a slot, not for a time.
	Clock rebound.Clock
}

// Signal is what a finished call tells an Adaptive limit.
type Signal uint8

// Signals.
const (
	// Success raises the limit by about one per limit's worth of
	// successes.
	Success Signal = iota
	// Congested (a 429, an overload, a timeout) cuts the limit.
	Congested
	// Neutral says nothing about the provider's load (a 400, a caller's
	// cancellation).
	Neutral
)

// Adaptive bounds the calls in flight to a provider and adapts the bound
// to the provider's health (AIMD). Calls beyond it wait, first in, first
// out within their Priority (WithPriority; unmarked calls are
// Interactive): waiting Interactive calls go before waiting Batch calls,
// but never more than MaxPassOver of them in a row ahead of the oldest
// Batch call. One whose context ends while waiting (its deadline passes,
// or it is cancelled) is dropped without ever being sent. It is safe for
// concurrent use; the zero value is not, use NewAdaptive.
type Adaptive struct {
	cfg AdaptiveConfig
	now func() time.Time // cfg.Clock.Now, or time.Now

	mu       sync.Mutex // guards the fields below
	limit    float64
	inFlight int
	// typical is a moving average of successful calls' latency. fastest
	// and fastestBefore are the least latency seen in this stretch of
	// fastestWindow and the one before: the least of the two is the
	// provider's latency with no queue, forgotten after a while so that a
	// provider that became slower for good is not held to its past.
	typical, fastest, fastestBefore time.Duration
	fastestSince                    time.Time
	// cutAt is when the limit was last cut, if cut: further cuts are
	// held back for a moment after one, so that one burst of failures
	// counts as one signal.
	cut   bool
	cutAt time.Time
	// waiting holds the calls waiting for a slot, by Priority; each is
	// a channel closed when its call may go.
	waiting *queue.Queue[chan struct{}]
}

// NewAdaptive returns an Adaptive limit for cfg.
func NewAdaptive(cfg AdaptiveConfig) *Adaptive {
	if cfg.Min <= 0 {
		cfg.Min = 1
	}
	if cfg.Max <= 0 {
		cfg.Max = 1000
	}
	if cfg.Initial <= 0 {
		cfg.Initial = 20
	}
	cfg.Initial = min(max(cfg.Initial, cfg.Min), cfg.Max)
	if cfg.Decrease <= 0 || cfg.Decrease >= 1 {
		cfg.Decrease = 0.7
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 10000
	}
	if cfg.MaxPassOver <= 0 {
		cfg.MaxPassOver = DefaultMaxPassOver
	}
	a := &Adaptive{cfg: cfg, now: time.Now, limit: float64(cfg.Initial),
		waiting: queue.New[chan struct{}](int(Batch)+1, cfg.MaxPassOver)}
	if cfg.Clock != nil {
		a.now = cfg.Clock.Now
	}
	return a
}

// Limit returns the current bound on calls in flight.
func (a *Adaptive) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.limit)
}

// InFlight returns how many calls are in flight.
func (a *Adaptive) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlight
}

// Expected returns the typical latency of a successful call lately (zero
// before any): a call with less time than this left before its deadline
// is not worth sending.
func (a *Adaptive) Expected() time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.typical
}

// TryAcquire takes a slot if one is free and nobody is waiting for one.
// Every slot taken must be given back with Release.
func (a *Adaptive) TryAcquire() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.free() {
		a.inFlight++
		return true
	}
	return false
}

// Free reports whether a call would have a slot at once, as TryAcquire
// would take it, and takes none.
func (a *Adaptive) Free() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.free()
}

// free is Free. a.mu is held.
func (a *Adaptive) free() bool {
	return a.waiting.Len() == 0 && float64(a.inFlight) < a.limit
}

// Acquire waits for a slot, in its turn: first in, first out among calls
// of ctx's Priority (PriorityFrom), Interactive before Batch within
// MaxPassOver. It returns ctx's error if ctx ends first (the call is then
// dropped from the queue, never sent), ErrDeadline if by its turn less
// time is left than a call typically takes (see Expected), or
// ErrQueueFull.
func (a *Adaptive) Acquire(ctx context.Context) error {
	class := int(PriorityFrom(ctx))
	a.mu.Lock()
	if a.waiting.Len() == 0 && float64(a.inFlight) < a.limit {
		a.inFlight++
		a.mu.Unlock()
		return nil
	}
	if a.waiting.LenOf(class) >= a.cfg.QueueSize {
		a.mu.Unlock()
		return ErrQueueFull
	}
	ready := make(chan struct{})
	w := a.waiting.Push(class, ready)
	a.mu.Unlock()

	select {
	case <-ready:
		if deadline, ok := ctx.Deadline(); ok && deadline.Sub(a.now()) < a.Expected() {
			a.Release(Neutral) // too late to be answered in time: not sent
			return ErrDeadline
		}
		return nil
	case <-ctx.Done():
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.waiting.Remove(w) { // granted just as the context ended: hand it on
			a.inFlight--
			a.grant()
		}
		return context.Cause(ctx)
	}
}

// Release gives a slot back, with what the call showed of the provider's
// health.
func (a *Adaptive) Release(s Signal) { a.ReleaseAfter(s, 0) }

// latencyTolerance is how many times its fastest a provider may answer
// before a success counts as congestion: a queue is building up there.
// fastestWindow is how long a fastest latency is remembered (two windows).
const (
	latencyTolerance = 4
	fastestWindow    = 30 * time.Second
)

// ReleaseAfter is Release for a call that took latency (zero if unknown).
// A success much slower than the fastest lately counts as congestion, as
// in TCP Vegas: the provider is queueing, and sending less before the
// timeouts start keeps stale work out of its queue.
func (a *Adaptive) ReleaseAfter(s Signal, latency time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.inFlight--
	if s == Success && latency > 0 {
		switch now := a.now(); {
		case now.Before(a.fastestSince):
			// The clock went back: how old the latencies seen are is no
			// longer known, so they are forgotten rather than kept until
			// the clock catches up.
			a.fastestBefore, a.fastest, a.fastestSince = 0, 0, now
		case now.Sub(a.fastestSince) >= fastestWindow:
			a.fastestBefore, a.fastest, a.fastestSince = a.fastest, 0, now
		}
		if a.fastest == 0 || latency < a.fastest {
			a.fastest = latency
		}
		if a.typical == 0 {
			a.typical = latency
		} else {
			a.typical += (latency - a.typical) / 16
		}
		least := a.fastest
		if a.fastestBefore > 0 {
			least = min(least, a.fastestBefore)
		}
		if latency > latencyTolerance*least {
			s = Congested
		}
	}
	switch s {
	case Success:
		a.limit = min(a.limit+1/a.limit, float64(a.cfg.Max))
	case Congested:
		// One cut per burst: the calls in flight when the provider
		// faltered will fail too, and say nothing new. A clock that went
		// back since the last cut does not hold the next one back.
		now := a.now()
		if since := now.Sub(a.cutAt); a.cut && since >= 0 && since < time.Second {
			break
		}
		a.limit = max(a.limit*a.cfg.Decrease, float64(a.cfg.Min))
		a.cut, a.cutAt = true, now
	}
	a.grant()
}

// grant hands free slots to the waiters whose turn it is. a.mu is held.
func (a *Adaptive) grant() {
	for float64(a.inFlight) < a.limit {
		w, ok := a.waiting.Pop()
		if !ok {
			return
		}
		a.inFlight++
		close(w.Value)
	}
}
