package rebound

// Breaker is a circuit breaker that Do and Transport consult before every
// attempt when it is set as Policy.Breaker. Package breaker provides one;
// the interface lives here so that rebound itself imports nothing.
type Breaker interface {
	// Allow asks to make one attempt now. It returns a permit to hand
	// back to Done, or an error saying why not (the call then stops with
	// StopBreakerOpen).
	Allow() (Permit, error)
	// Done reports how the attempt allowed with a permit ended.
	Done(Permit, Outcome)
}

// Permit is a Breaker's leave to make one attempt; only the Breaker that
// issued it knows what is in it.
type Permit uint64

// Outcome is what an attempt tells a Breaker about its target's health.
type Outcome uint8

// Outcomes.
const (
	// OutcomeSuccess: the attempt succeeded.
	OutcomeSuccess Outcome = iota
	// OutcomeFailure: the provider is to blame (transient, rate-limited
	// without a server wait, overloaded).
	OutcomeFailure
	// OutcomeIgnored: the attempt says nothing about the provider's
	// health (a 400, an exhausted quota, a context overflow, the caller's
	// cancellation, a rate limit that came with a server wait).
	OutcomeIgnored
)

// OutcomeOf returns the Outcome of an attempt that ended with err, judged
// as v. A rate limit that came with a server wait is ignored: the provider
// is up and said when to come back, and waiting is the limiter's and the
// retry loop's business; a breaker that counted it would open on a busy
// provider, not a dead one.
func OutcomeOf(err error, v Verdict) Outcome {
	switch {
	case err == nil:
		return OutcomeSuccess
	case v.Kind == KindRateLimited && v.HasServerWait:
		return OutcomeIgnored
	case v.Kind.retryable():
		return OutcomeFailure
	}
	return OutcomeIgnored
}
