package rebound

import (
	"math"
	"math/rand/v2"
	"time"
)

// retryLoop is the retry loop's decision logic as a state machine: told how an
// attempt failed, it says how long to wait before the next attempt or why
// to stop. It never sleeps and never reads the clock, so Do, the HTTP
// transport and simulations in virtual time all run the same decisions.
//
// A retryLoop is used by one call at a time. Its zero value is not usable;
// make one with newLoop.
type retryLoop struct {
	policy   Policy
	deadline time.Time
	// sideEffects: the call is attempted again only after an attempt
	// that provably never reached the server.
	sideEffects bool
	// once, if set, is why the call gets a single attempt.
	once      StopReason
	attempts  int
	waited    time.Duration
	prevDelay time.Duration // the last decorrelated-jitter delay
}

// newLoop returns the decision state of one call under p. A non-zero
// deadline is the caller's: a wait that would reach it is not made. A call
// with sideEffects is never retried.
func newLoop(p Policy, deadline time.Time, sideEffects bool) retryLoop {
	return retryLoop{policy: p, deadline: deadline, sideEffects: sideEffects}
}

// decision is what a retryLoop says after a failed attempt.
type decision struct {
	// Retry says to try again after Wait; otherwise the call stops for
	// Reason.
	Retry  bool
	Wait   time.Duration
	Reason StopReason
	// ServerWait is the server's wait hint when the verdict carried one
	// and the policy did not ignore it, even when it stopped the call.
	ServerWait    time.Duration
	HasServerWait bool
}

// next records a failed attempt with verdict v and decides what comes
// next; now is read only when the loop has a deadline. An unreached
// attempt provably never reached the server (its connection was never
// made, or the server said it did not take it on): it did nothing, so the
// call's side effects do not stop a retry. A body that can be sent only
// once still does.
func (l *retryLoop) next(v Verdict, now time.Time, unreached bool) decision {
	l.attempts++
	switch {
	case v.Kind == KindCanceled:
		return decision{Reason: StopCanceled}
	case !v.Kind.retryable():
		return decision{Reason: StopNotRetryable}
	case l.sideEffects && !unreached:
		return decision{Reason: StopSideEffects}
	case l.once != 0:
		return decision{Reason: l.once}
	}
	b := l.policy.forKind(v.Kind)
	if l.attempts >= b.maxAttempts {
		return decision{Reason: StopAttempts}
	}
	var d decision
	if v.HasServerWait && l.policy.ServerWait != ServerWaitIgnore {
		d.ServerWait, d.HasServerWait = max(v.ServerWait, 0), true
		d.Wait = d.ServerWait
		if limit := l.policy.maxServerWait(); d.Wait > limit {
			if l.policy.ServerWait == ServerWaitHonor {
				d.Reason, d.Wait = StopServerWait, 0
				return d
			}
			d.Wait = limit
		}
	} else {
		d.Wait = l.delay(b, l.attempts)
	}
	switch {
	case d.Wait > l.policy.waitBudget()-l.waited: // not waited+Wait: that can overflow
		d.Reason, d.Wait = StopWaitBudget, 0
	case !l.deadline.IsZero() && d.Wait >= l.deadline.Sub(now):
		d.Reason, d.Wait = StopDeadline, 0
	default:
		d.Retry = true
		l.waited += d.Wait
	}
	return d
}

// delay returns the jittered backoff before retry n under b.
func (l *retryLoop) delay(b backoff, n int) time.Duration {
	p := &l.policy
	if p.Jitter == JitterDecorrelated {
		prev := l.prevDelay
		if prev == 0 {
			prev = b.base
		}
		hi := time.Duration(math.MaxInt64)
		if prev <= hi/3 {
			hi = 3 * prev
		}
		d := b.base
		if hi > b.base {
			d += l.uniform(hi - b.base)
		}
		l.prevDelay = min(d, b.max)
		return l.prevDelay
	}
	d := min(rawDelay(p, b, n), b.max)
	switch p.Jitter {
	case JitterNone:
		return d
	case JitterEqual:
		half := d / 2
		return d - half + l.uniform(half)
	}
	return l.uniform(d)
}

// uniform returns a uniform duration in [0, d].
func (l *retryLoop) uniform(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	n := int64(d)
	if n < math.MaxInt64 {
		n++
	}
	if l.policy.Rand != nil {
		return time.Duration(l.policy.Rand.Int64N(n))
	}
	return time.Duration(rand.Int64N(n))
}

// rawDelay is the delay before retry n by the policy's shape, before the
// cap and jitter; it saturates at b.max instead of overflowing.
func rawDelay(p *Policy, b backoff, n int) time.Duration {
	switch p.shape() {
	case ShapeCustom:
		return max(p.Schedule(n), 0)
	case ShapeConstant:
		return b.base
	case ShapeLinear:
		if b.base > 0 && time.Duration(n) > b.max/b.base {
			return b.max
		}
		return time.Duration(n) * b.base
	}
	if b.base == 0 {
		return 0
	}
	f := float64(b.base) * math.Pow(p.multiplier(), float64(n-1))
	if f >= float64(b.max) {
		return b.max
	}
	return time.Duration(f)
}
