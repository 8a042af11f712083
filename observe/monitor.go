package observe

import (
	"fmt"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/lru"
	"github.com/rebound-go/rebound/internal/window"
)

// AlertKind is what an Alert reports.
type AlertKind uint8

// Alerts.
const (
	// AlertAbove: the target's retry rate has crossed the threshold.
	AlertAbove AlertKind = iota + 1
	// AlertBelow: it is back under the threshold.
	AlertBelow
	// AlertJump: it has at least doubled since the window before, by at
	// least the threshold (2% to 15%, say), whether or not it is above.
	AlertJump
)

func (k AlertKind) String() string {
	switch k {
	case AlertAbove:
		return "above"
	case AlertBelow:
		return "below"
	case AlertJump:
		return "jump"
	}
	return fmt.Sprintf("alert(%d)", k)
}

// Alert is a change in a target's retry rate worth a person's attention.
type Alert struct {
	Kind   AlertKind
	Target string
	// Rate is the share of calls that needed a retry over the last
	// Window; Previous is the same over the window before it (AlertJump).
	Rate, Previous float64
	// Calls is how many calls the rate is over.
	Calls int
	At    time.Time
}

func (a Alert) String() string {
	switch a.Kind {
	case AlertJump:
		return fmt.Sprintf("retry rate of %s jumped from %.1f%% to %.1f%% (%d calls)", a.Target, 100*a.Previous, 100*a.Rate, a.Calls)
	case AlertBelow:
		return fmt.Sprintf("retry rate of %s back to %.1f%% (%d calls)", a.Target, 100*a.Rate, a.Calls)
	}
	return fmt.Sprintf("retry rate of %s at %.1f%% (%d calls): look upstream or at your concurrency, do not raise the attempts", a.Target, 100*a.Rate, a.Calls)
}

// DefaultMaxTargets is how many targets a Monitor watches unless told
// otherwise. A target's windows take about 600 bytes, so the bound holds a
// Monitor under 8 MB.
const DefaultMaxTargets = 10_000

// Monitor watches, per target, the share of calls that needed a retry over
// a sliding window, and reports crossings and jumps to OnAlert. It is an
// Observer; put it in the Policy (beside others with Multi). Its zero
// value is ready to use with each field's default; set the fields before
// first use. It is safe for concurrent use.
type Monitor struct {
	// Threshold is the retry rate that is too high. Zero means 0.05.
	Threshold float64
	// Window is how far back the rate looks. Zero means 5 minutes.
	Window time.Duration
	// MinCalls is how many calls the window must hold before the rate
	// counts. Zero means 20.
	MinCalls int
	// OnAlert receives alerts, on the goroutine of the call that caused
	// them; it must not block. Nil means alerts are only counted.
	OnAlert func(Alert)
	// Clock is the time the Monitor goes by: which stretch of the window
	// a call falls in, and when an alert is raised. Nil means the real
	// clock. Only Now is used.
	Clock rebound.Clock
	// MaxTargets bounds how many targets the Monitor keeps windows for.
	// A call to a new target when it is full makes the Monitor forget
	// the target called least recently, idle for longest: a later call
	// to that one starts afresh, as a target never seen. Zero means
	// DefaultMaxTargets.
	MaxTargets int

	mu      sync.Mutex // guards the windows
	targets lru.Map[string, *rateWindow]
}

// rateBuckets is how many pieces a Window is cut into.
const rateBuckets = 10

type rateBucket struct {
	epoch          int64
	calls, retried int
}

// rateWindow is one target's recent calls, over two windows (this one and
// the one before, for jumps).
type rateWindow struct {
	buckets [2 * rateBuckets]rateBucket
	above   bool // an AlertAbove was sent and no AlertBelow since
	// jumped says an AlertJump was sent, at the epoch jumpedAt, so that
	// one jump is reported once.
	jumped   bool
	jumpedAt int64
}

func (m *Monitor) threshold() float64 {
	if m.Threshold <= 0 {
		return 0.05
	}
	return m.Threshold
}

func (m *Monitor) window() time.Duration {
	if m.Window <= 0 {
		return 5 * time.Minute
	}
	return m.Window
}

func (m *Monitor) minCalls() int {
	if m.MinCalls <= 0 {
		return 20
	}
	return m.MinCalls
}

func (m *Monitor) maxTargets() int {
	if m.MaxTargets <= 0 {
		return DefaultMaxTargets
	}
	return m.MaxTargets
}

// Observe implements rebound.Observer: every call that ends (an attempt
// that succeeded, or a give-up) counts, as retried if it made more than
// one attempt.
func (m *Monitor) Observe(e rebound.Event) {
	ended := (e.Type == rebound.EventAttempt && e.Err == nil) || e.Type == rebound.EventGiveUp
	if !ended {
		return
	}
	var now time.Time
	if m.Clock != nil {
		now = m.Clock.Now()
	} else {
		now = time.Now()
	}
	if alerts := m.record(e.Target, e.Attempt > 1, now); m.OnAlert != nil {
		for _, a := range alerts {
			m.OnAlert(a)
		}
	}
}

// Rate returns target's retry rate over the last Window and the calls it
// is over.
func (m *Monitor) Rate(target string, now time.Time) (float64, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	w, ok := m.targets.Load(target)
	if !ok {
		return 0, 0
	}
	epoch := m.epoch(now)
	calls, retried := w.sum(epoch-rateBuckets+1, epoch)
	return ratio(retried, calls), calls
}

// Len returns how many targets the Monitor keeps windows for.
func (m *Monitor) Len() int {
	return m.targets.Len()
}

// epoch returns which bucket-long stretch of time t falls in.
func (m *Monitor) epoch(t time.Time) int64 {
	return window.Epoch(t, max(int64(m.window())/rateBuckets, 1))
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// record counts one call and returns the alerts it raises.
func (m *Monitor) record(target string, retried bool, now time.Time) []Alert {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.targets.Size == 0 {
		m.targets.Size = m.maxTargets()
	}
	w := m.targets.Get(target, func() *rateWindow { return new(rateWindow) })
	epoch := m.epoch(now)
	b := &w.buckets[window.Slot(epoch, 2*rateBuckets)]
	if b.epoch != epoch {
		*b = rateBucket{epoch: epoch}
	}
	b.calls++
	if retried {
		b.retried++
	}

	calls, nRetried := w.sum(epoch-rateBuckets+1, epoch)
	if calls < m.minCalls() {
		return nil
	}
	rate, limit := ratio(nRetried, calls), m.threshold()
	var alerts []Alert
	switch {
	case rate > limit && !w.above:
		w.above = true
		alerts = append(alerts, Alert{Kind: AlertAbove, Target: target, Rate: rate, Calls: calls, At: now})
	case rate <= limit && w.above:
		w.above = false
		alerts = append(alerts, Alert{Kind: AlertBelow, Target: target, Rate: rate, Calls: calls, At: now})
	}
	prevCalls, prevRetried := w.sum(epoch-2*rateBuckets+1, epoch-rateBuckets)
	// A clock that went back since the last jump (d < 0) lets a jump be
	// reported again.
	if d := epoch - w.jumpedAt; prevCalls >= m.minCalls() && (!w.jumped || d >= rateBuckets || d < 0) {
		prev := ratio(prevRetried, prevCalls)
		if rate >= 2*prev && rate-prev >= limit {
			w.jumped, w.jumpedAt = true, epoch
			alerts = append(alerts, Alert{Kind: AlertJump, Target: target, Rate: rate, Previous: prev, Calls: calls, At: now})
		}
	}
	return alerts
}

// sum adds up the buckets of epochs from..to.
func (w *rateWindow) sum(from, to int64) (calls, retried int) {
	for _, b := range w.buckets {
		if b.epoch >= from && b.epoch <= to && b.calls > 0 {
			calls += b.calls
			retried += b.retried
		}
	}
	return calls, retried
}
