package fallback

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
)

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
	// Value is the answer. Without one, it is the value the last target
	// tried returned with its failure, if it has a Run (a failed HTTP
	// response, whole); else the zero value.
	Value Resp
	// Target is the name of the target that answered; empty if none.
	Target string
	// Trail is every step, in order.
	Trail []Step
	// Stale, if not nil, says that no target answered, for this error (a
	// *ChainError), and that Value is what Chain.Stale served in its
	// place: an old answer. Task counts such a call as failed, its
	// attempts as wasted.
	Stale error
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

// stale ends a call no target answered, for err: with what Chain.Stale
// serves in its place when the providers are to blame, else as failed.
func (d *chainCall[Req, Resp]) stale(req Req, err error) (Result[Resp], error) {
	res, cerr := d.failed(err)
	if d.c.Stale == nil || !d.providersFailed(err) {
		return res, cerr
	}
	v, ok := d.c.Stale(d.ctx, req, cerr)
	if !ok {
		return res, cerr
	}
	d.letGo()
	return Result[Resp]{Value: v, Trail: d.trail.steps, Stale: cerr}, nil
}

// providersFailed reports whether the call got no answer, for err, by a
// failure of the providers alone, which an old answer may stand in for:
// not for the request's own fault, a spend cap's refusal, the caller's
// cancellation, or a call with side effects.
func (d *chainCall[Req, Resp]) providersFailed(err error) bool {
	if d.sideEffects || d.ctx.Err() != nil {
		return false
	}
	for _, s := range d.trail.steps {
		if s.Skipped == "spend cap" || s.Skipped == "no price" {
			return false
		}
	}
	var gu *rebound.GiveUpError
	if !errors.As(err, &gu) {
		return true
	}
	switch gu.Reason {
	case rebound.StopRefused, rebound.StopInvalidPolicy, rebound.StopUnreplayableBody, rebound.StopCanceled:
		return false
	}
	switch gu.Verdict.Kind {
	case rebound.KindPermanent, rebound.KindContextOverflow, rebound.KindCanceled:
		return false
	}
	return true
}
