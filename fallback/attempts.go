package fallback

import (
	"context"
	"errors"
	"maps"
	"sync"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/observe"
)

// policy returns target i's Policy as the chain runs it: one overloaded
// answer is enough to move on, since the next target is likelier to answer
// than this one after a wait, unless the target says RetryOverloaded or is
// the last resort; so is one rate-limited answer while another target of
// its pool is still to be tried.
func (d *chainCall[Req, Resp]) policy(i int) rebound.Policy {
	t := &d.c.Targets[i]
	p := t.Policy
	overloaded := !t.RetryOverloaded && !d.lastResort(i)
	rateLimited := d.poolAfter(i)
	if !overloaded && !rateLimited {
		return p
	}
	p.PerKind = maps.Clone(p.PerKind)
	if p.PerKind == nil {
		p.PerKind = map[rebound.Kind]rebound.Override{}
	}
	for _, kind := range [...]rebound.Kind{rebound.KindOverloaded, rebound.KindRateLimited} {
		if kind == rebound.KindOverloaded && overloaded || kind == rebound.KindRateLimited && rateLimited {
			o := p.PerKind[kind]
			o.MaxAttempts = 1
			p.PerKind[kind] = o
		}
	}
	return p
}

// try runs req on target i, the call named key, and returns the answer and
// the index of its step in the trail. Under a hedging policy two attempts
// may run at once, and under a hedging chain two targets (alone is false).
func (d *chainCall[Req, Resp]) try(ctx context.Context, i int, key string, req Req, alone bool) (Resp, int, error) {
	t := &d.c.Targets[i]
	// Events name the call, after the caller's own target if any
	// ("model:task").
	target := key
	if d.task != "" {
		target += ":" + d.task
	}
	ctx = rebound.WithTarget(ctx, target)
	if t.Estimate != nil {
		ctx = cost.WithEstimate(ctx, t.Name, t.Estimate(req))
	}
	if t.Run != nil {
		return d.run(ctx, t, req, d.policy(i), alone)
	}
	return d.call(ctx, t, req, d.policy(i))
}

// call runs req on t, attempt by attempt through its Call under p,
// recording each attempt in the trail.
func (d *chainCall[Req, Resp]) call(ctx context.Context, t *Target[Req, Resp], req Req, p rebound.Policy) (Resp, int, error) {
	tr := &d.trail
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

// run runs req on t through its Run under p, the trail filled in from the
// events Run reports. A value it returns with its failure is kept (keep).
func (d *chainCall[Req, Resp]) run(ctx context.Context, t *Target[Req, Resp], req Req, p rebound.Policy, alone bool) (Resp, int, error) {
	tr := &d.trail
	l := &d.log
	if !alone || l.tr != nil {
		l = new(attemptLog) // a log of its own for each Run but a call's first
	}
	*l = attemptLog{tr: tr, target: t.Name, ended: -1, next: p.Observer}
	if co, ok := p.Observer.(rebound.CallObserver); ok {
		l.next = co.ObserveCall(ctx)
	}
	p.Observer = l
	d.letGo() // the failed value before, once another target is tried
	v, err := t.Run(ctx, req, p)
	tr.mu.Lock()
	l.closed = true // later events (a stream's, as the caller reads it) are not the trail's
	step := l.ended
	if err == nil && l.gaveUp != nil {
		err = l.gaveUp
	}
	if step < 0 {
		step = tr.untold(t.Name, err, &p)
	}
	tr.mu.Unlock()
	if err != nil {
		d.keep(v)
		step = -1
	}
	return v, step, err
}

// untold adds to the trail the step of a Run that told of no attempt,
// and returns its index: -1 if it made none (refused before any). tr.mu
// is held.
func (tr *trail) untold(target string, err error, p *rebound.Policy) int {
	s := Step{Target: target, Attempt: 1, Err: err}
	if gu := (*rebound.GiveUpError)(nil); errors.As(err, &gu) {
		if gu.Attempts == 0 {
			return -1
		}
		s.Verdict = gu.Verdict
	} else if err != nil {
		s.Verdict = p.Classify(err)
	}
	tr.steps = append(tr.steps, s)
	return len(tr.steps) - 1
}

// attemptLog is the Observer a Run reports to: it adds each attempt to the
// trail as it ends, notes a give-up, and passes every event on.
type attemptLog struct {
	tr     *trail
	target string
	next   rebound.Observer

	// Guarded by tr.mu.
	ended  int                  // the step of the attempt that ended last; -1 for none
	gaveUp *rebound.GiveUpError // what a give-up event said
	closed bool                 // Run has returned
}

func (l *attemptLog) Observe(e rebound.Event) {
	l.tr.mu.Lock()
	if !l.closed {
		switch e.Type {
		case rebound.EventAttempt:
			l.ended = len(l.tr.steps)
			l.tr.steps = append(l.tr.steps, Step{Target: l.target, Attempt: e.Attempt, Err: e.Err})
		case rebound.EventRetry, rebound.EventGiveUp:
			if l.ended >= 0 {
				l.tr.steps[l.ended].Verdict = e.Verdict
			}
			if e.Type == rebound.EventGiveUp {
				l.gaveUp = &rebound.GiveUpError{Attempts: e.Attempt, Reason: e.Reason, Verdict: e.Verdict, Waited: e.Waited, Err: e.Err}
			}
		}
	}
	l.tr.mu.Unlock()
	if l.next != nil {
		l.next.Observe(e)
	}
}

// race tries target i, the call named key, and, if j is not -1 and i is
// slow to answer, target j beside it (see Chain.Hedge). It returns the
// answer and its step, or -1 and each target's failure (nil for j if it
// was not tried).
func (d *chainCall[Req, Resp]) race(i, j int, key string, req Req) (Resp, int, [2]error) {
	if j < 0 {
		v, step, err := d.try(d.ctx, i, key, req, true)
		if err != nil {
			step = -1
		}
		return v, step, [2]error{err}
	}
	return d.hedged(i, j, key, req)
}

// hedged is race with a hedge, target j.
func (d *chainCall[Req, Resp]) hedged(i, j int, key string, req Req) (Resp, int, [2]error) {
	var errs [2]error
	type answer struct {
		v    Resp
		step int
	}
	var (
		mu      sync.Mutex // guards errs and started
		started int
	)
	keys := [2]string{key, d.key(j, req)}
	p := rebound.Policy{MaxAttempts: 1, Hedge: d.c.Hedge, Budget: d.c.Targets[j].Policy.Budget}
	ctx := rebound.WithTarget(d.ctx, d.c.Targets[i].Name) // whose first answers time the hedge
	a, err := rebound.Do(ctx, p, func(ctx context.Context) (answer, error) {
		mu.Lock()
		k := started // 0: target i; 1: its hedge, target j
		started++
		mu.Unlock()
		v, step, err := d.try(ctx, []int{i, j}[k], keys[k], req, false)
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
