package rebound

import (
	"math"
	"time"

	"github.com/rebound-go/rebound/internal/firsttoken"
)

// defaultHedgePercentile is the share of a target's recent first-token
// times a hedge waits for: about one call in ten is hedged, the share of
// calls a RetryBudget lets retry. It is the rule behind `rebound sim
// --scenario hedge`, not a figure tuned to it.
const defaultHedgePercentile = 0.9

// Hedge, set in a Policy, hedges the attempts that are slow to their first
// token. When an attempt has produced nothing after the hedge delay, a
// second attempt of the same call starts beside it; whichever produces
// content first wins, and the other is cancelled (its context ends with
// ErrHedgeLost) and waited for, its response body closed: an attempt must
// heed its context, or the call waits for it. Once a target has a delay,
// each of its attempts runs in a goroutine of its own, hedged or not. What counts as
// content is the adapter's: in Do, the function's success; in Transport, a
// response below 400 (for an event stream, its first content event); in
// Stream, the first event past the preamble.
//
// A hedge is an upstream request more, so it is never made unless asked
// for, and never for a call that is not safe to repeat: one marked
// WithSideEffects (in Transport, or by its SideEffects, and without an
// Idempotency-Key), or whose body can be sent only once. It is a retry as far as the provider is
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

	times firsttoken.Times
}

// hedgeSamples is how many recent first-token times a Hedge keeps per
// target; it trusts their percentile from firsttoken.MinSamples, as the
// Transport's adaptive first-token bound does.
const hedgeSamples = 256

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
		if d, ok := h.times.Percentile(target, q, firsttoken.MinSamples); ok {
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
		h.times.Add(target, d, hedgeSamples)
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
