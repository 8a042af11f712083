package rebound

import (
	"math"
	"time"
)

// Defaults of a zero Policy; each field's doc gives its figure.
const (
	defaultMaxAttempts   = 3
	defaultBaseDelay     = 500 * time.Millisecond
	defaultMaxDelay      = 10 * time.Second
	defaultMultiplier    = 2.0
	defaultWaitBudget    = 30 * time.Second
	defaultMaxServerWait = 60 * time.Second
)

// defaultPerKind is the patience a zero Policy gives each kind of failure
// beyond its own settings: rate limits, which pass, get more attempts and
// longer waits; an overloaded provider one quick retry (a fallback chain
// moves on at once instead). A field applies only where the Policy's own
// field is zero: a MaxAttempts of 1 means no retry, whatever the kind.
var defaultPerKind = [...]Override{
	KindRateLimited: {MaxAttempts: 5, BaseDelay: 2 * time.Second, MaxDelay: 20 * time.Second},
	KindOverloaded:  {MaxAttempts: 2, BaseDelay: time.Second},
}

// Policy says how often and how patiently a call is retried.
//
// A Policy is a plain value: copy it freely and share it between goroutines.
// Its zero value is the policy rebound recommends for a call to an LLM API,
// the one its benchmarks call "rebound": three attempts, exponential backoff
// from 500 ms doubling up to 10 s with full jitter; more patience for rate
// limits (five attempts, from 2 s up to 20 s) and one quick retry for an
// overloaded provider (from 1 s); at most 30 s of waiting in all; server
// wait hints honoured up to 60 s. Exhausted quotas, oversized requests and
// permanent errors are never retried. Each field documents its own
// default; add a Breaker (package breaker), or use fallback.Recommended for
// a whole setup.
type Policy struct {
	// MaxAttempts is the most attempts a call makes, the first included.
	// Zero means 3; 1 disables retries.
	MaxAttempts int

	// BaseDelay is the delay before the first retry, before jitter.
	// Zero means 500 ms, or MaxDelay if that is set and
	// smaller; NoDelay means immediate retries.
	BaseDelay time.Duration

	// MaxDelay caps every computed backoff delay, before and after jitter.
	// It does not cap server wait hints (see MaxServerWait).
	// Zero means 10 s; NoDelay means every retry is
	// immediate.
	MaxDelay time.Duration

	// Multiplier is the growth factor of the exponential shape.
	// Zero means 2; otherwise it must be at least 1.
	Multiplier float64

	// Jitter randomises each computed delay. The zero value is JitterFull.
	Jitter Jitter

	// Shape is how the delay grows with the retry number. The zero value
	// is ShapeExponential. Schedule, if set, overrides it.
	Shape Shape

	// Schedule, if set, gives the raw delay before retry n (n = 1 for the
	// first retry) instead of Shape; MaxDelay and Jitter still apply.
	// A negative result means immediate. It cannot be written as JSON.
	Schedule func(retry int) time.Duration

	// WaitBudget bounds the total time a call spends waiting between
	// attempts. A retry whose wait would overrun it is not made: the call
	// stops at once with the last error. Zero means 30 s; NoDelay allows
	// only immediate retries.
	WaitBudget time.Duration

	// MaxServerWait bounds how long a server may ask the caller to wait
	// (Retry-After and friends). What happens beyond it is ServerWait's
	// choice. Zero means 60 s.
	MaxServerWait time.Duration

	// ServerWait says what to do with a server's wait hint. The zero value
	// is ServerWaitHonor.
	ServerWait ServerWait

	// AttemptTimeout bounds each attempt; an attempt that runs out of time
	// is a transient failure and is retried. Zero means no per-attempt
	// timeout (the caller's context still applies). In Do the attempt's
	// context ends when the function returns, so a result that still reads
	// from it (an HTTP response body) must be read inside the function;
	// Transport keeps it alive until the body is read or closed.
	AttemptTimeout time.Duration

	// PerKind overrides attempts and delays for failures of one kind:
	// rate-limited calls usually deserve more patience than transient
	// ones. Only KindTransient, KindRateLimited and KindOverloaded may be
	// overridden; the other kinds are never retried. A kind without an
	// entry gets the default one (rate limits: 5 attempts from 2 s up to
	// 20 s; overloads: 2 attempts from 1 s), in each field where the
	// Policy's own is zero.
	PerKind map[Kind]Override

	// Rules classify the failed responses they match before Classifier
	// (or Classify) is asked: the first rule that matches decides (see
	// Rule). Nil means none.
	Rules []Rule

	// Classifier turns a failed attempt's error that no rule matched into
	// a Verdict. Nil means Classify.
	Classifier func(error) Verdict

	// Observer, if set, receives an Event for every attempt, every
	// scheduled retry and every give-up. It must be safe for concurrent
	// use when the Policy is shared.
	Observer Observer

	// Breaker, if set, is asked before every attempt and told how each
	// ended (see the breaker package). A refusal stops the call with
	// StopBreakerOpen. Only failures the provider is to blame for count
	// against it (see OutcomeOf).
	Breaker Breaker

	// Budget, if set, caps retries across all the calls that share it
	// (see RetryBudget): every first attempt deposits, every retry
	// withdraws, and a refused withdrawal stops the call with
	// StopRetryBudget. Transport keeps a RetryBudget per host when this is
	// nil.
	Budget Budget

	// Hedge, if set, starts a second attempt beside one that is slow to
	// its first token, for calls that are safe to repeat (see Hedge). Nil
	// means never: a hedge is an upstream request more.
	Hedge *Hedge

	// Rand is the source of jitter. Nil means math/rand/v2's global
	// generator, which is safe for concurrent use. A seeded *rand.Rand
	// makes delays reproducible but is not safe for concurrent use: give
	// each goroutine's calls to Do their own; a Transport serialises its
	// requests' use of it.
	Rand interface {
		// Int64N returns a uniform value in [0, n); n > 0.
		Int64N(n int64) int64
	}
}

// Override replaces some of a Policy's settings for one kind of failure.
// A zero field inherits the Policy's value; NoDelay asks for zero.
type Override struct {
	// MaxAttempts is the most attempts a call makes when its latest
	// failure is of this kind, counting attempts of every kind.
	MaxAttempts int
	// BaseDelay replaces Policy.BaseDelay.
	BaseDelay time.Duration
	// MaxDelay replaces Policy.MaxDelay.
	MaxDelay time.Duration
}

// durationOr resolves a Policy duration: zero is the default, NoDelay zero.
func durationOr(d, def time.Duration) time.Duration {
	switch d {
	case 0:
		return def
	case NoDelay:
		return 0
	}
	return d
}

// backoff is the resolved delay settings for one kind of failure.
type backoff struct {
	maxAttempts int
	base, max   time.Duration
}

// resolved returns the effective backoff of p, defaults applied.
func (p *Policy) resolved() backoff {
	b := backoff{maxAttempts: p.MaxAttempts, max: durationOr(p.MaxDelay, defaultMaxDelay)}
	if b.maxAttempts == 0 {
		b.maxAttempts = defaultMaxAttempts
	}
	b.base = durationOr(p.BaseDelay, min(defaultBaseDelay, b.max))
	return b
}

// forKind returns the effective backoff for a failure of kind k.
func (p *Policy) forKind(k Kind) backoff {
	b := p.resolved()
	o, ok := p.PerKind[k]
	if !ok {
		if int(k) >= len(defaultPerKind) || defaultPerKind[k] == (Override{}) {
			return b
		}
		o = defaultPerKind[k]
		// A default gives way to the Policy's own setting.
		if p.MaxAttempts != 0 {
			o.MaxAttempts = 0
		}
		if p.BaseDelay != 0 {
			o.BaseDelay = 0
		}
		if p.MaxDelay != 0 {
			o.MaxDelay = 0
			if o.BaseDelay > b.max { // a default base never passes the Policy's own cap
				o.BaseDelay = b.max
				if b.max == 0 {
					o.BaseDelay = NoDelay
				}
			}
		}
	}
	if o.MaxAttempts != 0 {
		b.maxAttempts = o.MaxAttempts
	}
	if o.MaxDelay != 0 {
		b.max = durationOr(o.MaxDelay, 0)
		if o.BaseDelay == 0 {
			b.base = min(b.base, b.max)
		}
	}
	b.base = durationOr(o.BaseDelay, b.base)
	return b
}

func (p *Policy) multiplier() float64 {
	if p.Multiplier == 0 {
		return defaultMultiplier
	}
	return p.Multiplier
}

func (p *Policy) shape() Shape {
	if p.Schedule != nil {
		return ShapeCustom
	}
	return p.Shape
}

func (p *Policy) waitBudget() time.Duration { return durationOr(p.WaitBudget, defaultWaitBudget) }

func (p *Policy) maxServerWait() time.Duration {
	return durationOr(p.MaxServerWait, defaultMaxServerWait)
}

// Validate reports the first thing wrong with p, in one line, or nil.
func (p Policy) Validate() error { return p.validate() }

// validate is Validate without a copy of p.
func (p *Policy) validate() error {
	if p.MaxAttempts < 0 {
		return policyErr("max_attempts", "must not be negative (got %d)", p.MaxAttempts)
	}
	for _, f := range []struct {
		key string
		d   time.Duration
	}{
		{"base_delay_ms", p.BaseDelay}, {"max_delay_ms", p.MaxDelay}, {"wait_budget_ms", p.WaitBudget},
		{"max_server_wait_ms", p.MaxServerWait},
	} {
		if f.d < 0 && f.d != NoDelay {
			return policyErr(f.key, "must not be negative (got %v)", f.d)
		}
	}
	if p.AttemptTimeout < 0 {
		return policyErr("attempt_timeout_ms", "must not be negative (got %v)", p.AttemptTimeout)
	}
	if m := p.Multiplier; m != 0 && !(m >= 1 && !math.IsInf(m, 1)) {
		return policyErr("multiplier", "must be a finite number of at least 1 (got %v)", m)
	}
	if int(p.Jitter) >= len(jitterNames) {
		return policyErr("jitter", "unknown value %d", p.Jitter)
	}
	if int(p.Shape) >= len(shapeNames) {
		return policyErr("shape", "unknown value %d", p.Shape)
	}
	if p.Shape == ShapeCustom && p.Schedule == nil {
		return policyErr("shape", "custom needs a Schedule function")
	}
	if p.Hedge != nil {
		if err := p.Hedge.validate(); err != nil {
			return err
		}
	}
	if int(p.ServerWait) >= len(serverWaitNames) {
		return policyErr("server_wait", "unknown value %d", p.ServerWait)
	}
	if b := p.resolved(); b.max < b.base {
		return policyErr("max_delay_ms", "%d is below base_delay_ms %d", b.max.Milliseconds(), b.base.Milliseconds())
	}
	for k, o := range p.PerKind {
		if !k.retryable() {
			return policyErr("per_kind", "%v is never retried and cannot be overridden", k)
		}
		key := "per_kind." + k.String()
		if o.MaxAttempts < 0 {
			return policyErr(key+".max_attempts", "must not be negative (got %d)", o.MaxAttempts)
		}
		if (o.BaseDelay < 0 && o.BaseDelay != NoDelay) || (o.MaxDelay < 0 && o.MaxDelay != NoDelay) {
			return policyErr(key, "delays must not be negative")
		}
		if b := p.forKind(k); b.max < b.base {
			return policyErr(key+".max_delay_ms", "%d is below base_delay_ms %d", b.max.Milliseconds(), b.base.Milliseconds())
		}
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		if err := r.validate(ruleKey(i)); err != nil {
			return err
		}
		// A rule's wait is a server's hint: one the policy would never
		// honour stops the call instead of waiting, which no one who
		// writes a wait means.
		if limit := min(p.waitBudget(), p.maxServerWait()); r.Kind.retryable() && p.ServerWait == ServerWaitHonor && r.Wait > limit {
			return policyErr(ruleKey(i)+".wait_ms", "%d is more than the policy waits (%d, the lesser of wait_budget_ms and max_server_wait_ms): the call would stop instead",
				r.Wait.Milliseconds(), limit.Milliseconds())
		}
	}
	return nil
}

// Classify returns the verdict p gives a failed attempt's error, as its
// retries judge it: the first of its Rules that matches, else its
// Classifier, else Classify. A caller handed the final failure of a
// Transport (a response with status 400 or above, as an *HTTPError, or a
// *GiveUpError) learns from it what to do with the request next.
func (p *Policy) Classify(err error) Verdict { return p.classify(err, time.Now) }

// classify is Classify by the clock now.
func (p *Policy) classify(err error, now func() time.Time) Verdict {
	if p.Classifier != nil {
		if v, ok := ruleVerdict(err, now, p.Rules); ok {
			return v
		}
		return p.Classifier(err)
	}
	return classify(err, now, p.Rules)
}
