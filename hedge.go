package rebound

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"
)

// defaultHedgePercentile is the share of a target's recent first-token
// times a hedge waits for: about one call in ten is hedged, the share of
// calls a RetryBudget lets retry. It is the rule behind `rebound sim
// --scenario hedge`, not a figure tuned to it.
const defaultHedgePercentile = 0.9

// ErrHedgeLost is the cause of the cancellation of a hedged attempt that
// lost the race: the other produced content first.
var ErrHedgeLost = errors.New("rebound: another attempt of the hedged call answered first")

// Hedge, set in a Policy, hedges the attempts that are slow to their first
// token. When an attempt has produced nothing after the hedge delay, a
// second attempt of the same call starts beside it; whichever produces
// content first wins, and the other is cancelled (its context ends with
// ErrHedgeLost) and waited for, its response body closed: an attempt must
// heed its context, or the call waits for it. What counts as
// content is the adapter's: in Do, the function's success; in Transport, a
// response below 400 (for an event stream, its first content event); in
// Stream, the first event past the preamble.
//
// A hedge is an upstream request more, so it is never made unless asked
// for, and never for a call that is not safe to repeat: one marked
// WithSideEffects (without an Idempotency-Key, in Transport), or whose
// body can be sent only once. It is a retry as far as the provider is
// concerned: it draws from the Policy's Budget, if any, and is not made
// when that is spent, nor when the Policy's Breaker refuses it a permit.
// An attempt that fails while the other runs leaves the race to the
// other; when both fail, the later failure is the attempt's, and the
// Policy judges it as any other.
//
// The delay is the Percentile of the target's (WithTarget; in Transport,
// else the host) recent first-token times, once 16 of them are known;
// until then it is After. It is timed by the real clock, since the
// attempts are real goroutines, whatever Clock the call's waits go by. A
// Hedge keeps the times of at most 1024 targets and is safe for
// concurrent use; share one among the calls to the same targets. Its zero
// value hedges at the 90th percentile once enough times are known.
type Hedge struct {
	// Percentile, in (0, 1], is the share of recent first-token times an
	// attempt may be slower than before it is hedged (1: slower than all). Zero means 0.9:
	// about one call in ten is hedged, the share of calls a RetryBudget
	// lets retry; negative means After alone.
	Percentile float64
	// After is the delay while too few first-token times are known for
	// Percentile (or always, if Percentile is negative). Zero means no
	// hedge until then.
	After time.Duration

	times firstTokens
}

// hedgeSamples is how many recent first-token times a Hedge keeps per
// target, and minHedgeSamples how many it needs before it trusts their
// percentile (as many as the Transport's adaptive first-token bound).
const (
	hedgeSamples    = 256
	minHedgeSamples = minTokenSamples
)

// Delay returns how long an attempt to target may go without content
// before it is hedged; zero means no hedge.
func (h *Hedge) Delay(target string) time.Duration {
	q := h.Percentile
	if q == 0 {
		q = defaultHedgePercentile
	}
	if !(q <= 1) { // NaN too: an invalid Hedge hedges nothing (see Policy.Validate)
		return 0
	}
	if q > 0 {
		if d, ok := h.times.percentile(target, q, hedgeSamples, minHedgeSamples); ok {
			return d
		}
	}
	return max(h.After, 0)
}

// Observe notes that an attempt to target took d from its start to its
// first content. Do, Transport and Stream call it for the attempts they
// make under the Hedge; a caller that times first tokens itself (a
// simulation, a stream read inside Do) may call it too. An attempt
// cancelled because its hedge won is noted at the time it was cancelled:
// it was slower than that, which is all a percentile needs to know.
func (h *Hedge) Observe(target string, d time.Duration) {
	if d >= 0 {
		h.times.add(target, d, hedgeSamples)
	}
}

// validate reports what is wrong with h, for Policy.Validate.
func (h *Hedge) validate() error {
	if q := h.Percentile; math.IsNaN(q) || q > 1 {
		return policyErr("hedge.percentile", "must be at most 1, e.g. 0.9 for the 90th percentile (got %v)", q)
	}
	if h.After < 0 {
		return policyErr("hedge.after", "must not be negative (got %v)", h.After)
	}
	return nil
}

// firstTokens keeps recent first-token times per key (a target, or a
// host), for the bounds and delays that learn from them. Its zero value
// is ready to use; it is safe for concurrent use.
type firstTokens struct {
	mu   sync.Mutex // guards keys
	keys map[string]*tokenRing
}

// maxTokenKeys bounds how many keys' times a firstTokens keeps.
const maxTokenKeys = 1024

// tokenRing is a ring of one key's recent first-token times, and the last
// percentile taken of them.
type tokenRing struct {
	times []time.Duration
	n     int // samples taken, ever
	// cached is the percentile q of the times as they were after sample
	// cachedAt: sorting on every call would cost more than the call's
	// other bookkeeping, and a few samples move a percentile little.
	cached   time.Duration
	cachedQ  float64
	cachedAt int
}

// recompute is how many samples a cached percentile outlives.
const recompute = 8

// add notes d for key, in a ring of size samples.
func (f *firstTokens) add(key string, d time.Duration, size int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.keys[key]
	if r == nil {
		if f.keys == nil {
			f.keys = map[string]*tokenRing{}
		}
		if len(f.keys) >= maxTokenKeys {
			for k := range f.keys { // any one: its times are cheap to learn again
				delete(f.keys, k)
				break
			}
		}
		r = &tokenRing{times: make([]time.Duration, 0, size)}
		f.keys[key] = r
	}
	if len(r.times) < size {
		r.times = append(r.times, d)
	} else {
		r.times[r.n%size] = d
	}
	r.n++
}

// percentile returns the q-th percentile of key's recent times, if at
// least least of them are known.
func (f *firstTokens) percentile(key string, q float64, size, least int) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.keys[key]
	if r == nil || r.n < least {
		return 0, false
	}
	if r.cachedQ != q || r.n-r.cachedAt >= recompute {
		sorted := slices.Clone(r.times[:min(r.n, size)])
		slices.Sort(sorted)
		r.cached, r.cachedQ, r.cachedAt = sorted[int(float64(len(sorted)-1)*q)], q, r.n
	}
	return r.cached, true
}

// racer is one attempt of a hedged race: what it returned, or the panic
// or runtime.Goexit that ended it.
type racer[T any] struct {
	v     T
	o     outcome
	i     int           // 0 for the first attempt, 1 for the hedge
	took  time.Duration // from its start to its end
	abort *abort
}

// abort is a panic or runtime.Goexit that ended an attempt in its own
// goroutine, to be raised again in the caller's.
type abort struct {
	value any // the panic's value; nil for runtime.Goexit
}

func (a *abort) raise() {
	if a.value == nil {
		runtime.Goexit()
	}
	panic(a.value)
}

// hedged makes attempt n of e's call with attempt: once, and again beside
// it if e's Policy hedges, the call may be repeated, and the first has
// produced nothing after the hedge delay (see Hedge). attempt returns once
// its try has produced content (a nil error) or failed; end ends its
// context, and it calls end once what it returned is no longer in use (at
// once, or when a response body is closed). The first content wins; the
// other's context is cancelled with ErrHedgeLost and it is waited for.
// What an attempt returned and is not the call's (a loser's, or a failure
// the other's outcome replaced) goes to discard, if not nil. key names the
// target whose first-token times set the delay.
//
// The hedge has a breaker permit and a budget withdrawal of its own: the
// permit of the attempt returned is left in e.held for the engine to
// settle, the other's is settled here (a loser's as saying nothing). A
// panic in either attempt is raised again here, once neither is running,
// with its own value.
func hedged[T any](e *engine, n int, key string, attempt func(ctx context.Context, end func(), hedge bool) (T, outcome), discard func(T)) (T, outcome) {
	h := e.policy.Hedge
	if h == nil || e.sideEffects || e.once != 0 {
		return attempt(e.ctx, noCancel, false)
	}
	delay := h.Delay(key)
	if delay <= 0 {
		start := time.Now()
		v, o := attempt(e.ctx, noCancel, false)
		if o.err == nil {
			h.Observe(key, time.Since(start))
		}
		return v, o
	}
	var (
		results = make(chan racer[T], 2)
		cancels [2]context.CancelCauseFunc
		leases  = [2]lease{e.handOver()}
		ended   [2]*racer[T]
		lost    [2]bool // cancelled before it ended
		wg      sync.WaitGroup
	)
	launch := func(i int) {
		ctx, cancel := context.WithCancelCause(e.ctx)
		cancels[i] = cancel
		start := time.Now()
		wg.Go(func() {
			r := racer[T]{i: i}
			returned := false
			defer func() {
				r.took = time.Since(start)
				if !returned {
					// A recovered value is never nil since Go 1.21
					// (panic(nil) gives a *runtime.PanicNilError), so nil
					// means runtime.Goexit.
					r.abort = &abort{value: recover()}
				}
				results <- r
			}()
			r.v, r.o = attempt(ctx, func() { cancel(nil) }, i == 1)
			returned = true
		})
	}
	launch(0)
	timer := time.NewTimer(delay)
	defer timer.Stop()

	running, ret := 1, -1 // ret: the attempt whose outcome is the call's
	for running > 0 && (ret < 0 || ended[ret].o.err != nil && ended[ret].abort == nil) {
		select {
		case <-timer.C:
			if e.startHedge(&leases[1], n) {
				running++
				launch(1)
			}
		case r := <-results:
			running--
			ended[r.i], ret = &r, r.i
		}
	}
	// The race is decided: an attempt still running lost it.
	for i, cancel := range cancels {
		if cancel != nil && ended[i] == nil {
			lost[i] = true
			cancel(ErrHedgeLost)
		}
	}
	for ; running > 0; running-- {
		r := <-results
		ended[r.i] = &r
	}
	wg.Wait()
	var aborted *abort
	if a := ended[ret].abort; a != nil {
		aborted = a
	}
	for i, r := range ended {
		if r == nil || i == ret && r.abort == nil {
			continue
		}
		cancels[i](nil)
		if i == ret {
			continue
		}
		switch {
		case r.abort != nil:
			if aborted == nil {
				aborted = r.abort
			}
			leases[i].done(OutcomeFailure)
			continue
		case lost[i]:
			leases[i].done(OutcomeIgnored)
		case r.o.err == nil:
			leases[i].done(OutcomeSuccess)
		default:
			leases[i].done(OutcomeOf(r.o.err, e.classify(r.o.err, r.o.timedOut)))
		}
		if discard != nil {
			discard(r.v)
		}
	}
	if r := ended[0]; r.abort == nil && (lost[0] || ret == 0 && r.o.err == nil) {
		h.Observe(key, r.took) // a loser's: slower than this, at least
	}
	e.held = leases[ret]
	if aborted != nil {
		aborted.raise()
	}
	return ended[ret].v, ended[ret].o
}

// startHedge starts the hedge of attempt n, if the budget and the breaker
// allow one: it withdraws a retry, takes the breaker's permit into l, and
// tells the observer.
func (e *engine) startHedge(l *lease, n int) bool {
	now := e.clock.Now()
	if b := e.policy.Budget; b != nil && !b.Withdraw(now) {
		return false
	}
	permit, refused := e.allow()
	if refused != nil {
		if b := e.policy.Budget; b != nil {
			b.Refund(now)
		}
		return false
	}
	*l = permit
	if obs := e.policy.Observer; obs != nil {
		obs.Observe(Event{Type: EventHedge, Target: e.target, Attempt: n, Elapsed: e.elapsed(), BudgetLeft: e.budgetLeft()})
	}
	return true
}
