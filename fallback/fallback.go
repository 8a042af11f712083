// Package fallback moves a request along an ordered list of targets (a
// model, a cheaper model, a cached answer) until one answers.
//
// Each Target has its own retry policy, and usually its own breaker. A
// Chain tries them in order and moves to the next when:
//
//   - the target's breaker is open (no request is sent);
//   - the target is overloaded (at once, without spending retries on it,
//     unless the target says RetryOverloaded);
//   - the target's quota is exhausted: it is then skipped for
//     QuotaCooldown, since quota does not come back in seconds (by this
//     chain alone, or, with Chain.Cooldowns shared, by every replica's);
//   - its retries are spent.
//
// A context overflow first calls the Compact hook, which returns a smaller
// request, and tries the same target once more; if that overflows too, the
// chain moves on to a target whose ContextWindow is larger. A permanent
// error stops the chain: a 400 on one model is a 400 on all. So does the
// caller's cancellation.
//
// The Result says which target answered and carries the trail: every
// target tried or skipped, every attempt, every verdict, and the tokens
// each attempt reported (cost.Report), from which package cost counts
// spend and waste.
package fallback

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/observe"
)

// DefaultQuotaCooldown is how long a target whose quota ran out is skipped
// unless the Chain says otherwise.
const DefaultQuotaCooldown = 10 * time.Minute

// ErrNoTarget is the error of a chain that skipped every target without
// making a single attempt.
var ErrNoTarget = errors.New("fallback: no target could be tried")

// Target is one way to answer a request.
type Target[Req, Resp any] struct {
	// Name identifies the target in results, trails and price tables,
	// e.g. "gpt-x" or "cache".
	Name string
	// Call answers a request. It may report the tokens it used with
	// cost.Report.
	Call func(ctx context.Context, req Req) (Resp, error)
	// Policy is the retry policy on this target, its Breaker included.
	Policy rebound.Policy
	// ContextWindow is the target's context window in tokens, or zero if
	// unknown. After a context overflow the chain moves only to a target
	// with a larger window.
	ContextWindow int
	// RetryOverloaded retries an overloaded target under its Policy
	// instead of moving on at once.
	RetryOverloaded bool
	// Estimate, for spend caps (cost.WithCaps), says what one attempt of
	// req on this target may use, priced under Name: each attempt
	// reserves it before it is made, and a target whose attempt would
	// pass a cap is skipped for the next. Leave it nil for a Call whose
	// requests go through rebound.Transport, which reserves for each
	// request itself.
	Estimate func(req Req) cost.Usage
}

// Chain is an ordered list of targets. It is safe for concurrent use once
// set up; its fields must not change while it is in use.
type Chain[Req, Resp any] struct {
	Targets []Target[Req, Resp]
	// Compact, if set, is called on a context overflow with the request
	// that overflowed and the error; the smaller request it returns is
	// tried once more on the same target, and then on the targets after
	// it.
	Compact func(ctx context.Context, req Req, err error) (Req, error)
	// QuotaCooldown is how long a target whose quota ran out is skipped.
	// Zero means DefaultQuotaCooldown.
	QuotaCooldown time.Duration
	// Hedge, if set, hedges each target with the next: when the target
	// being tried has not answered after the hedge's delay (learnt from
	// that target's answers, see rebound.Hedge), the target that would be
	// tried after it starts beside it; the first answer wins and the
	// other is cancelled. The hedge draws from its target's retry budget,
	// if it has one. A target that ran as a hedge is not tried again; a
	// call with side effects is never hedged. Nil means no hedging
	// between targets (a target's Policy.Hedge still hedges within it).
	Hedge *rebound.Hedge
	// Cooldowns remembers which targets are cooling down. Nil means the
	// chain's own memory; one shared between replicas (package
	// reboundredis has one) lets a target found out of quota by one be
	// skipped by all.
	Cooldowns Cooldowns

	own MemoryCooldowns // the cool-downs when Cooldowns is nil
}

// Cooldowns remembers which targets are cooling down: skipped by a Chain
// without a request, because their quota ran out. A Chain passes the time
// by its call's clock (rebound.WithClock); an implementation may keep time
// by another clock it trusts more, a shared store's, say. It must be safe
// for concurrent use and must not hold a call for long: a store that is
// slow or away should answer from what this process knows.
type Cooldowns interface {
	// Start makes target cool down for d from now.
	Start(ctx context.Context, target string, now time.Time, d time.Duration)
	// Cooling reports whether target is cooling down at now.
	Cooling(ctx context.Context, target string, now time.Time) bool
}

// MemoryCooldowns is Cooldowns in this process's memory. Its zero value
// is ready to use; it is safe for concurrent use.
type MemoryCooldowns struct {
	mu    sync.Mutex           // guards until
	until map[string]time.Time // target → cooling down until
}

// Start makes target cool down until now+d.
func (m *MemoryCooldowns) Start(_ context.Context, target string, now time.Time, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.until == nil {
		m.until = map[string]time.Time{}
	}
	m.until[target] = now.Add(d)
}

// Cooling reports whether target is cooling down at now; a cool-down that
// has ended is forgotten.
func (m *MemoryCooldowns) Cooling(_ context.Context, target string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.until[target]
	if ok && !now.Before(until) {
		delete(m.until, target)
		return false
	}
	return ok
}

// Step is one entry of a Result's trail: an attempt on a target, or a
// target skipped without one.
type Step struct {
	Target string
	// Attempt is the attempt's number on this target, from 1; zero for a
	// skipped target.
	Attempt int
	// Skipped says why the target was not tried, e.g. "breaker open".
	Skipped string
	// Err is the attempt's error; nil for the answer.
	Err error
	// Verdict is the classifier's verdict on Err.
	Verdict rebound.Verdict
	// Usage is what the attempt reported with cost.Report.
	Usage cost.Usage
	// Hedge marks an attempt started beside a slower one of the same
	// call (the target's Policy.Hedge); it costs what it reported, won or
	// lost.
	Hedge bool
	// Answered marks the attempt whose answer is the Result's.
	Answered bool
}

// Result is what a Chain did with a request.
type Result[Resp any] struct {
	// Value is the answer; the zero value if no target answered.
	Value Resp
	// Target is the name of the target that answered; empty if none.
	Target string
	// Trail is every step, in order.
	Trail []Step
}

// Task returns the result as a cost.Task, for a cost.Ledger.
func (r Result[Resp]) Task() cost.Task {
	t := cost.Task{Succeeded: r.Target != ""}
	for _, s := range r.Trail {
		if s.Attempt == 0 {
			continue
		}
		t.Attempts = append(t.Attempts, cost.Attempt{Target: s.Target, Usage: s.Usage, Answered: s.Answered})
	}
	return t
}

// ChainError is the error of a chain that got no answer. It wraps the last
// target's error (a *rebound.GiveUpError, usually), or ErrNoTarget.
type ChainError struct {
	Trail []Step
	Err   error
}

func (e *ChainError) Error() string {
	var tried []string
	for _, s := range e.Trail {
		if len(tried) == 0 || tried[len(tried)-1] != s.Target {
			tried = append(tried, s.Target)
		}
	}
	return fmt.Sprintf("fallback: no answer from %s: %v", strings.Join(tried, ", "), e.Err)
}

func (e *ChainError) Unwrap() error { return e.Err }

// Do sends req along the chain and returns the first answer, with the
// trail of how it got there. Without an answer the error is a *ChainError.
func (c *Chain[Req, Resp]) Do(ctx context.Context, req Req) (Result[Resp], error) {
	d := &chainCall[Req, Resp]{c: c, ctx: ctx, task: callctx.Target(ctx), clock: callctx.ClockOf(ctx),
		sideEffects: callctx.SideEffects(ctx), last: ErrNoTarget, tried: make([]bool, len(c.Targets))}
	for i := range c.Targets {
		if d.tried[i] {
			continue // it ran as a hedge
		}
		t := &c.Targets[i]
		if skip := d.skip(i); skip != "" {
			d.trail.steps = append(d.trail.steps, Step{Target: t.Name, Skipped: skip})
			continue
		}
		if d.attempted && d.sideEffects {
			// Another target would do the side effect a second time.
			return d.failed(d.last)
		}
		compacted := false
		for {
			j := d.hedgeTarget(i)
			v, answered, errs := d.race(i, j, req)
			if answered >= 0 {
				for k, err := range errs { // a loser out of quota still cools down
					if err != nil {
						d.judge([]int{i, j}[k], err, false)
					}
				}
				d.trail.steps[answered].Answered = true
				return Result[Resp]{Value: v, Target: d.trail.steps[answered].Target, Trail: d.trail.steps}, nil
			}
			stop, again := d.judge(i, errs[0], c.Compact != nil && !compacted)
			if stop != nil {
				return d.failed(stop)
			}
			if j >= 0 {
				if stop, _ := d.judge(j, errs[1], false); stop != nil {
					return d.failed(stop)
				}
			}
			if again {
				smaller, cerr := c.Compact(ctx, req, errs[0])
				if cerr != nil {
					return d.failed(fmt.Errorf("fallback: compacting the request: %w", cerr))
				}
				req, compacted = smaller, true
				continue
			}
			break
		}
	}
	return d.failed(d.last)
}

// chainCall is the state of one Chain.Do.
type chainCall[Req, Resp any] struct {
	c           *Chain[Req, Resp]
	ctx         context.Context
	task        string // the caller's target, if any
	clock       rebound.Clock
	sideEffects bool
	trail       trail

	last       error  // the latest failure
	attempted  bool   // an attempt was made
	overflowed bool   // a context overflow happened, compaction and all
	minWindow  int    // after an overflow, only larger windows
	tried      []bool // targets tried as hedges, not to be tried again
}

// trail is a call's steps, added to by hedged attempts at once.
type trail struct {
	mu    sync.Mutex // guards steps while attempts run
	steps []Step
}

// failed ends the call without an answer, with err.
func (d *chainCall[Req, Resp]) failed(err error) (Result[Resp], error) {
	return Result[Resp]{Trail: d.trail.steps}, &ChainError{Trail: d.trail.steps, Err: err}
}

// skip says why target i is not to be tried now, or "".
func (d *chainCall[Req, Resp]) skip(i int) string {
	t := &d.c.Targets[i]
	switch {
	case d.c.cooldowns().Cooling(d.ctx, t.Name, d.clock.Now()):
		return "quota exhausted"
	case d.overflowed && t.ContextWindow <= d.minWindow:
		return "context window too small"
	}
	return ""
}

// hedgeTarget is the target that would be tried after i, to hedge i with,
// or -1: none, or the chain does not hedge.
func (d *chainCall[Req, Resp]) hedgeTarget(i int) int {
	if d.c.Hedge == nil || d.sideEffects {
		return -1
	}
	for j := i + 1; j < len(d.c.Targets); j++ {
		if !d.tried[j] && d.skip(j) == "" {
			return j
		}
	}
	return -1
}

// race tries target i and, if j is not -1 and i is slow to answer, target
// j beside it (see Chain.Hedge). It returns the answer and its step, or -1
// and each target's failure (nil for j if it was not tried).
func (d *chainCall[Req, Resp]) race(i, j int, req Req) (Resp, int, [2]error) {
	var errs [2]error
	if j < 0 {
		v, step, err := d.c.try(d.ctx, &d.c.Targets[i], req, &d.trail, d.task)
		if err != nil {
			step = -1
		}
		errs[0] = err
		return v, step, errs
	}
	type answer struct {
		v    Resp
		step int
	}
	var (
		mu      sync.Mutex // guards errs and started
		started int
	)
	p := rebound.Policy{MaxAttempts: 1, Hedge: d.c.Hedge, Budget: d.c.Targets[j].Policy.Budget}
	ctx := rebound.WithTarget(d.ctx, d.c.Targets[i].Name) // whose first answers time the hedge
	a, err := rebound.Do(ctx, p, func(ctx context.Context) (answer, error) {
		mu.Lock()
		k := started // 0: target i; 1: its hedge, target j
		started++
		mu.Unlock()
		target := []int{i, j}[k]
		v, step, err := d.c.try(ctx, &d.c.Targets[target], req, &d.trail, d.task)
		mu.Lock()
		errs[k] = err
		mu.Unlock()
		return answer{v, step}, err
	})
	if err == nil {
		return a.v, a.step, errs
	}
	if started > 1 {
		d.tried[j] = true
	}
	return a.v, -1, errs
}

// judge takes in target i's failure err (nil: not tried): it records it,
// starts a cool-down for an exhausted quota, notes a context overflow, and
// returns the error that stops the chain, if it does; again says that i
// overflowed and may be tried once more with a smaller request, if
// compact allows.
func (d *chainCall[Req, Resp]) judge(i int, err error, compact bool) (stop error, again bool) {
	if err == nil {
		return nil, false
	}
	t := &d.c.Targets[i]
	var gu *rebound.GiveUpError
	if !errors.As(err, &gu) {
		gu = &rebound.GiveUpError{Verdict: rebound.Classify(err), Err: err}
	}
	if gu.Attempts == 0 {
		// The breaker, or a spend cap, refused before any attempt: a
		// cheaper target may still fit the cap.
		why := "breaker open"
		switch {
		case errors.Is(err, cost.ErrNoPrice):
			why = "no price"
		case gu.Reason == rebound.StopRefused:
			why = "spend cap"
		}
		d.trail.steps = append(d.trail.steps, Step{Target: t.Name, Skipped: why, Err: err})
		if d.last == ErrNoTarget {
			d.last = err
		}
		return nil, false
	}
	d.attempted, d.last = true, err
	switch gu.Verdict.Kind {
	case rebound.KindPermanent, rebound.KindCanceled:
		return err, false
	case rebound.KindQuotaExhausted:
		d.c.coolDown(d.ctx, t.Name, d.clock.Now())
	case rebound.KindContextOverflow:
		if compact {
			return nil, true
		}
		d.overflowed, d.minWindow = true, max(d.minWindow, t.ContextWindow)
	}
	return nil, false
}

// try runs req on t under its policy, recording each attempt in tr, and
// returns the answer and the index of its step in tr. Under a hedging
// policy two attempts may run at once, and under a hedging chain two
// targets. task is the caller's target, if any.
func (c *Chain[Req, Resp]) try(ctx context.Context, t *Target[Req, Resp], req Req, tr *trail, task string) (Resp, int, error) {
	p := t.Policy
	if !t.RetryOverloaded {
		// One overloaded answer is enough to move on: the next target is
		// likelier to answer than this one after a wait.
		p.PerKind = maps.Clone(p.PerKind)
		if p.PerKind == nil {
			p.PerKind = map[rebound.Kind]rebound.Override{}
		}
		o := p.PerKind[rebound.KindOverloaded]
		o.MaxAttempts = 1
		p.PerKind[rebound.KindOverloaded] = o
	}
	var (
		attempt   int  // guarded by tr.mu, as are the two below
		hedgeNext bool // the next attempt to start is a hedge
		ended     = -1 // the step of the attempt that ended last
	)
	// The trail's verdicts and hedges come from the events; the caller's
	// observer still sees them all (a CallObserver its calls too).
	p.Observer = observe.Multi(rebound.ObserverFunc(func(e rebound.Event) {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		switch e.Type {
		case rebound.EventHedge:
			hedgeNext = true
		case rebound.EventRetry, rebound.EventGiveUp:
			// The verdict is on the attempt that ended last: a hedged
			// race is over by then.
			if ended >= 0 {
				tr.steps[ended].Verdict = e.Verdict
			}
		}
	}), p.Observer)
	// Events name the target, after the caller's own target if any
	// ("model:task").
	target := t.Name
	if task != "" {
		target += ":" + task
	}
	ctx = rebound.WithTarget(ctx, target)
	if t.Estimate != nil {
		ctx = cost.WithEstimate(ctx, t.Name, t.Estimate(req))
	}
	type answer struct {
		v    Resp
		step int
	}
	a, err := rebound.Do(ctx, p, func(ctx context.Context) (answer, error) {
		// The step is taken when the attempt starts, so that the trail
		// is in the order attempts started, and filled in when it ends.
		tr.mu.Lock()
		attempt++
		step := len(tr.steps)
		tr.steps = append(tr.steps, Step{Target: t.Name, Attempt: attempt, Hedge: hedgeNext})
		hedgeNext = false
		tr.mu.Unlock()
		var usage cost.Recorder
		v, err := t.Call(cost.WithRecorder(ctx, &usage), req)
		var verdict rebound.Verdict
		switch {
		case err == nil:
		case ctx.Err() != nil:
			verdict.Kind = rebound.KindCanceled
		default:
			// The policy's verdict, for an attempt that no retry or
			// give-up will report: one that failed while its hedge ran.
			verdict = p.Classify(err)
		}
		tr.mu.Lock()
		defer tr.mu.Unlock()
		tr.steps[step].Err, tr.steps[step].Usage, tr.steps[step].Verdict, ended = err, usage.Usage(), verdict, step
		return answer{v, step}, err
	})
	return a.v, a.step, err
}

// coolDown starts the cool-down of the target name, out of quota at now.
func (c *Chain[Req, Resp]) coolDown(ctx context.Context, name string, now time.Time) {
	d := c.QuotaCooldown
	if d <= 0 {
		d = DefaultQuotaCooldown
	}
	c.cooldowns().Start(ctx, name, now, d)
}

// cooldowns returns the chain's Cooldowns, or its own memory.
func (c *Chain[Req, Resp]) cooldowns() Cooldowns {
	if c.Cooldowns != nil {
		return c.Cooldowns
	}
	return &c.own
}

// Recommended returns rebound's recommended setup over targets: each gets
// the zero rebound.Policy, rebound's recommended one (its Observer,
// Rules, Classifier and Rand are kept) and a breaker of its own, made with breakers (the zero Config is
// the recommended one), and the chain falls back on overload, exhausted
// quota and open breakers.
func Recommended[Req, Resp any](breakers breaker.Config, targets ...Target[Req, Resp]) *Chain[Req, Resp] {
	set := breaker.NewSet(breakers, 0)
	out := make([]Target[Req, Resp], len(targets))
	for i, t := range targets {
		p := rebound.Policy{Observer: t.Policy.Observer, Rules: t.Policy.Rules, Classifier: t.Policy.Classifier, Rand: t.Policy.Rand}
		p.Breaker = set.Get(t.Name)
		t.Policy = p
		out[i] = t
	}
	return &Chain[Req, Resp]{Targets: out}
}
