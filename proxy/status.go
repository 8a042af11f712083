package proxy

import (
	"errors"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/window"
)

// The status page's window: its figures are over the last StatusWindow,
// kept in statusBuckets stretches, so that they are over between 4.5 and
// 5 minutes of calls.
const (
	StatusWindow  = 5 * time.Minute
	statusBuckets = 10
	// maxStatusRows bounds the upstreams and keys the board keeps
	// figures of; they come from the config, so it is never reached but
	// by a config of that many.
	maxStatusRows = 1024
	// lastFailures is how many of the latest failed attempts the page
	// lists.
	lastFailures = 20
)

// The latency histogram: slot i holds calls that took up to
// latencyBase·2^((i+1)/latencySteps); the last one everything longer
// (over 100 s).
const (
	latencyBase  = 100 * time.Microsecond
	latencySteps = 4 // slots per doubling: a quantile is within 19% of the truth
	latencySlots = 80
)

// numKinds is how many verdict kinds there are.
const numKinds = int(rebound.KindCanceled) + 1

// statusBoard keeps, for the status page, the figures of the calls to
// each upstream and key over the last StatusWindow (from rebound's
// events, as each call judges them: see call.Observe), a chart of their
// last chartMinutes minutes, and the latest failed attempts. It is safe
// for concurrent use.
type statusBoard struct {
	mu       sync.Mutex               // guards the fields below
	rows     map[[2]string]*statusRow // by upstream and key
	failures [lastFailures]failureRecord
	next     int // where the next failure goes in failures
	count    int // failures held, up to lastFailures
}

// statusRow is one upstream's key's figures.
type statusRow struct {
	board         *statusBoard
	upstream, key string
	inFlight      atomic.Int64 // requests sent and not yet answered to the end

	mu      sync.Mutex // guards buckets and minutes
	buckets [statusBuckets]statusBucket
	minutes [chartMinutes]minuteBucket // the chart's, a ring (statusRow.minute)
}

// statusBucket is a stretch of StatusWindow/statusBuckets.
type statusBucket struct {
	epoch          int64
	calls, retried int64 // calls ended, and those of them that made more than one attempt
	// Each call ended is one of these three: answered by its first
	// attempt, answered by a later one, or given up (a breaker's refusal
	// too).
	first, afterRetries, gaveUp int64
	broken                      int64 // answers that broke off after they began
	mayHaveRun                  int64 // an MCP server's calls cut short that may have run (mcpStatus)
	attempts                    int64
	failed                      [numKinds]int64 // failed attempts by the kind of their verdict
	latency                     [latencySlots]uint32
	latencies                   int64      // calls in latency
	tokens                      tokenTally // of the answers the key gave
}

// failureRecord is a failed attempt, as the page lists it: never a header,
// a body or a key's value.
type failureRecord struct {
	at            time.Time
	route         string
	upstream, key string
	kind          string
	status        int // the upstream's HTTP status; 0 when there was none (a broken connection)
}

func newStatusBoard() *statusBoard { return &statusBoard{rows: map[[2]string]*statusRow{}} }

// row returns the row of target's upstream and key (splitTarget), or nil
// once the board holds maxStatusRows others.
func (s *statusBoard) row(target string) *statusRow {
	upstream, key := splitTarget(target)
	id := [2]string{upstream, key}
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.rows[id]
	if r == nil && len(s.rows) < maxStatusRows {
		r = &statusRow{board: s, upstream: upstream, key: key}
		s.rows[id] = r
	}
	return r
}

// note counts e, an event of a call to r's upstream and key made for
// route; judged says e carries the verdict of a failed attempt (the call
// judges, since only it knows which verdict is an attempt's).
func (r *statusRow) note(e rebound.Event, judged bool, route string) {
	if r == nil {
		return
	}
	now := time.Now()
	ended := e.Type == rebound.EventGiveUp || (e.Type == rebound.EventAttempt && e.Err == nil)
	if ended && e.Attempt == 0 && errors.As(e.Err, new(*cost.CapError)) {
		// A tenant's spend cap refused the call before anything was
		// sent: the key was not asked, and a flood of refusals would
		// drown its calls and retry rate.
		return
	}
	if e.Type != rebound.EventAttempt && !ended && !judged {
		return
	}
	r.mu.Lock()
	b, m := r.bucket(now), r.minute(now)
	if e.Type == rebound.EventAttempt {
		b.attempts++
		if e.Attempt > 1 {
			m.retries++
		}
	}
	if ended {
		b.calls++
		m.calls++
		switch {
		case e.Type == rebound.EventGiveUp:
			b.gaveUp++
			m.gaveUp++
		case e.Attempt > 1:
			b.afterRetries++
		default:
			b.first++
		}
		if e.Attempt > 1 {
			b.retried++
		}
		if e.Attempt > 0 { // not a breaker's refusal, which made no attempt
			b.latency[latencySlot(e.Elapsed)]++
			b.latencies++
		}
	}
	if judged && int(e.Verdict.Kind) < numKinds {
		b.failed[e.Verdict.Kind]++
	}
	r.mu.Unlock()
	if judged {
		status := 0
		if he := (*rebound.HTTPError)(nil); errors.As(e.Err, &he) {
			status = he.StatusCode
		}
		r.board.failed(failureRecord{at: now, route: route, upstream: r.upstream, key: r.key, kind: e.Verdict.Kind.String(), status: status})
	}
}

// bucket returns the bucket of now, emptied if it held an older stretch.
// r.mu is held.
func (r *statusRow) bucket(now time.Time) *statusBucket {
	epoch := window.Epoch(now, int64(StatusWindow/statusBuckets))
	b := &r.buckets[window.Slot(epoch, statusBuckets)]
	if b.epoch != epoch {
		*b = statusBucket{epoch: epoch}
	}
	return b
}

// broke counts an answer of r's that broke off after it began: its
// status and some of its body (a stream's first events, mostly) had gone
// to the client, so that no retry could mend it.
func (r *statusRow) broke() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.bucket(time.Now()).broken++
	r.mu.Unlock()
}

// failed adds f to the latest failures.
func (s *statusBoard) failed(f failureRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failures[s.next] = f
	s.next = (s.next + 1) % lastFailures
	s.count = min(s.count+1, lastFailures)
}

// latencySlot returns the histogram slot of d.
func latencySlot(d time.Duration) int {
	if d <= latencyBase {
		return 0
	}
	i := int(math.Ceil(math.Log2(float64(d)/float64(latencyBase))*latencySteps)) - 1
	return min(max(i, 0), latencySlots-1)
}

// latencyBound returns the longest latency of slot i.
func latencyBound(i int) time.Duration {
	return time.Duration(float64(latencyBase) * math.Exp2(float64(i+1)/latencySteps))
}

// rowFigures are a row's figures over the window.
type rowFigures struct {
	inFlight, calls, retried, attempts int64
	first, afterRetries, gaveUp        int64
	broken, mayHaveRun                 int64
	minutes                            [chartMinutes]minuteCounts // oldest first, the current minute last
	failed                             [numKinds]int64
	p50, p99                           time.Duration // 0 without calls
	tokens                             tokenTally
}

// figures adds up r's buckets of the window that ends at now, and reads
// its chart up to now.
func (r *statusRow) figures(now time.Time) rowFigures {
	f := rowFigures{inFlight: r.inFlight.Load()}
	epoch := window.Epoch(now, int64(StatusWindow/statusBuckets))
	var latency [latencySlots]int64
	var n int64
	r.mu.Lock()
	for i := range r.buckets {
		b := &r.buckets[i]
		if b.epoch <= epoch-statusBuckets || b.epoch > epoch {
			continue
		}
		f.calls += b.calls
		f.retried += b.retried
		f.first += b.first
		f.afterRetries += b.afterRetries
		f.gaveUp += b.gaveUp
		f.broken += b.broken
		f.mayHaveRun += b.mayHaveRun
		f.attempts += b.attempts
		for k := range b.failed {
			f.failed[k] += b.failed[k]
		}
		for j, c := range b.latency {
			latency[j] += int64(c)
		}
		n += b.latencies
		f.tokens.merge(b.tokens)
	}
	f.minutes = r.chart(now)
	r.mu.Unlock()
	f.p50, f.p99 = quantile(latency[:], n, 0.5), quantile(latency[:], n, 0.99)
	return f
}

// quantile returns the q-quantile of the n latencies in the histogram h:
// the bound of the slot that holds it.
func quantile(h []int64, n int64, q float64) time.Duration {
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	var seen int64
	for i, c := range h {
		if seen += c; seen >= rank {
			return latencyBound(i)
		}
	}
	return latencyBound(len(h) - 1)
}

// latest returns the latest failures, newest first.
func (s *statusBoard) latest() []failureRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]failureRecord, 0, s.count)
	for i := 1; i <= s.count; i++ {
		out = append(out, s.failures[(s.next-i+lastFailures)%lastFailures])
	}
	return out
}

// all returns the rows, by upstream and key.
func (s *statusBoard) all() []*statusRow {
	s.mu.Lock()
	rows := make([]*statusRow, 0, len(s.rows))
	for _, r := range s.rows {
		rows = append(rows, r)
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b *statusRow) int {
		if c := strings.Compare(a.upstream, b.upstream); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	return rows
}
