package rebound

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/internal/window"
)

// Clock is the time a call waits by. Do and Transport use the real clock
// unless the context carries another (see WithClock): a simulation runs
// rebound's real retry, breaker and fallback code a month at a time by
// giving it a virtual clock that jumps instead of sleeping.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, and then returns ctx's
	// cause.
	Sleep(ctx context.Context, d time.Duration) error
}

// WithClock returns a context whose calls wait by c. The context's own
// deadline is still real time: a virtual clock is for calls without one.
func WithClock(ctx context.Context, c Clock) context.Context {
	return callctx.WithClock(ctx, c)
}

// WithSideEffects marks the calls made with the returned context as having
// side effects (sending a message, appending to a file, charging a card): a
// timeout does not mean nothing happened, so such a call is attempted
// once, whatever its error. Do and Stream cannot know what a function did
// before it failed, even with a failure to connect; Transport makes an
// attempt again when it provably never reached the server (see
// Transport.SideEffects).
func WithSideEffects(ctx context.Context) context.Context {
	return callctx.WithSideEffects(ctx)
}

// WithTarget names the target of the calls made with the returned context
// ("gpt-x:summarise", say): events, logs and metrics carry it.
func WithTarget(ctx context.Context, target string) context.Context {
	return callctx.WithTarget(ctx, target)
}

// TargetFrom returns the target ctx names (WithTarget), or "": a
// fallback.Target that makes its own attempts keys its breaker by it.
func TargetFrom(ctx context.Context) string { return callctx.Target(ctx) }

// A Guard, carried by a context (WithGuard), is asked before every attempt
// of the calls made with that context (Do, Stream, Transport; retries and
// hedges included) and may refuse it before anything is sent. Package
// cost's spend caps are one: an attempt reserves what it may cost, and
// its real usage settles the reservation.
type Guard interface {
	// Admit is asked before an attempt is sent. req is the attempt's
	// request in Transport (its body is the attempt's to send: a copy
	// is to be had from GetBody, when it is not nil), nil in Do and
	// Stream. It returns the context the attempt runs under and end,
	// which is called once with what became of the attempt: in
	// Transport as soon as the response (or the error) is known, and
	// end may then replace resp.Body to read what it needs as the
	// caller reads, settling when that body ends or is closed; in Do
	// and Stream when the attempt is over, with a nil response. An
	// error refuses the attempt: nothing is sent, and the call stops
	// with StopRefused and an error that wraps it.
	Admit(ctx context.Context, req *http.Request) (context.Context, func(*http.Response, error), error)
}

type guardKey struct{}

// WithGuard returns a context whose calls' attempts g admits. It replaces
// any Guard ctx carried: a Guard that adds to another (spend caps within
// a tenant's) reads the one before from the context itself.
func WithGuard(ctx context.Context, g Guard) context.Context {
	return context.WithValue(ctx, guardKey{}, g)
}

// guardFrom returns the Guard ctx carries, or nil.
func guardFrom(ctx context.Context) Guard {
	g, _ := ctx.Value(guardKey{}).(Guard)
	return g
}

// Observer receives a call's events. Observe is called synchronously on
// the calling goroutine and must not block.
type Observer interface {
	Observe(Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// EventType is what an Event reports.
type EventType uint8

// Event types.
const (
	// EventAttempt: an attempt ended; Err is nil on success.
	EventAttempt EventType = iota + 1
	// EventRetry: a failed attempt will be retried after Wait.
	EventRetry
	// EventGiveUp: the call stopped without success, for Reason.
	EventGiveUp
	// EventContinue: an event stream cut after content is continued by a
	// new request (Transport.Continuations); Attempt is the
	// continuation's number, from 1, and Err the cut.
	EventContinue
	// EventHedge: attempt Attempt, slow to its first token, has a hedge:
	// a second attempt beside it (see Hedge).
	EventHedge
	// EventRestart: the server behind Target went down, for Err, and is
	// started again after Wait; Attempt is the number of that start, from
	// 2. What supervises a server reports it (reboundmcp).
	EventRestart
	// EventBreaker: the breaker of Target entered State; an open one
	// probes after Wait, if it says, and Err is why it opened, if known.
	// The breaker's owner reports it (breaker.Notify, reboundmcp).
	EventBreaker
	// EventCacheHit: Transport.Cache answered the call from what it kept,
	// Age old, no provider asked.
	EventCacheHit
	// EventCacheStale: the call gave up (Attempt, Reason, Err say how),
	// and Transport.Cache served an answer it kept, Age old, instead.
	EventCacheStale
)

var eventNames = [...]string{EventAttempt: "attempt", EventRetry: "retry", EventGiveUp: "give_up", EventContinue: "continue", EventHedge: "hedge",
	EventRestart: "restart", EventBreaker: "breaker", EventCacheHit: "cache_hit", EventCacheStale: "cache_stale"}

func (t EventType) String() string { return enumString(eventNames[:], int(t), "event") }

// Event is one step of a call, as seen by an Observer; or, for
// EventRestart and EventBreaker, a change in a target's health that
// belongs to no one call, given to the Observer itself (never to a
// CallObserver's per-call one), with no Elapsed or Waited.
type Event struct {
	Type EventType
	// Target names what was called (see WithTarget); Transport uses the
	// request's host when the context names none.
	Target string
	// Attempt is the attempt number, from 1 (EventRestart: the start's).
	Attempt int
	// Err is the attempt's error; nil for a successful attempt.
	Err error
	// Verdict is the classifier's verdict on Err (EventRetry, EventGiveUp).
	Verdict Verdict
	// Wait is the wait before the next attempt (EventRetry), the next
	// start (EventRestart) or an open breaker's probe (EventBreaker).
	Wait time.Duration
	// Waited is the call's total wait so far (Wait included).
	Waited time.Duration
	// Reason is why the call stopped (EventGiveUp).
	Reason StopReason
	// Elapsed is the time since the call started.
	Elapsed time.Duration
	// BudgetLeft is how many retries the policy's retry budget still
	// allows (EventRetry, EventGiveUp); -1 when it has none that can say.
	BudgetLeft float64
	// State is the state a breaker entered (EventBreaker): "closed",
	// "open" or "half-open", as breaker.State names them.
	State string
	// Age is how old an answer served from a cache is (EventCacheHit,
	// EventCacheStale), to the second, by its Age header.
	Age time.Duration
}

// CallObserver is an Observer that wants to know where each call starts:
// Do, Transport and Stream ask it for the Observer of each call, given the
// call's context, before the first attempt. A tracing observer starts the
// call's span there, as a child of the caller's.
type CallObserver interface {
	Observer
	ObserveCall(ctx context.Context) Observer
}

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

// Budget caps the retries of all the calls to one target, so that a fleet
// of clients cannot multiply the load on a provider that is already
// failing. Do, Transport and Stream deposit for every first attempt and
// withdraw for every retry; a refused withdrawal stops the call with
// StopRetryBudget. RetryBudget is the standard one.
type Budget interface {
	// Deposit records a first attempt made at now.
	Deposit(now time.Time)
	// Withdraw asks to spend one retry at now; false means the budget is
	// spent.
	Withdraw(now time.Time) bool
	// Refund gives back a retry withdrawn at the time at that was never
	// made: its wait was cut short, or a breaker refused it.
	Refund(at time.Time)
	// Available returns how many retries the budget would allow at now,
	// for events and metrics.
	Available(now time.Time) float64
}

// Defaults of a zero RetryBudget; each field's doc gives its figure.
const (
	defaultBudgetRatio        = 0.1
	defaultBudgetMinPerSecond = 10
	defaultBudgetTTL          = 10 * time.Second
)

// budgetSlots is how many pieces the TTL window is cut into.
const budgetSlots = 10

// RetryBudget is a token bucket of retries, as in Finagle's RetryBudget
// and gRPC's retry throttling: every first attempt deposits Ratio of a
// token, every retry spends one, and deposits and spending are forgotten
// after TTL. A reserve of MinPerSecond·TTL tokens lets a quiet client
// retry. Under a full outage the retries are capped near Ratio of the
// calls, so the load stays near 1 + Ratio of the calls instead of
// MaxAttempts times it; when a few calls fail, they retry as the policy
// says.
//
// Its zero value is ready to use, with each field's default; set the
// fields before first use. It is safe for concurrent use.
type RetryBudget struct {
	// Ratio is the share of a token each first attempt deposits. Zero
	// means 0.1: retries are at most about 10% of calls, beyond the
	// reserve.
	Ratio float64
	// MinPerSecond is the reserve: this many retries a second are always
	// allowed, on average over TTL. Zero means 10; negative means no
	// reserve.
	MinPerSecond float64
	// TTL is how long deposits and retries are remembered. Zero means
	// 10 s.
	TTL time.Duration

	mu    sync.Mutex // guards slots
	slots [budgetSlots]budgetSlot
}

type budgetSlot struct {
	epoch                 int64 // which slot-long stretch of time the counts are from
	deposits, withdrawals float64
}

func (b *RetryBudget) ttl() time.Duration {
	if b.TTL <= 0 {
		return defaultBudgetTTL
	}
	return b.TTL
}

func (b *RetryBudget) ratio() float64 {
	if b.Ratio <= 0 {
		return defaultBudgetRatio
	}
	return b.Ratio
}

func (b *RetryBudget) reserve() float64 {
	switch {
	case b.MinPerSecond < 0:
		return 0
	case b.MinPerSecond == 0:
		return defaultBudgetMinPerSecond * b.ttl().Seconds()
	}
	return b.MinPerSecond * b.ttl().Seconds()
}

// epoch returns which slot-long stretch of time now falls in.
func (b *RetryBudget) epoch(now time.Time) int64 {
	return window.Epoch(now, max(int64(b.ttl())/budgetSlots, 1))
}

// slot returns the slot of now, emptied first if it held another stretch
// of time (an older one, or a later one if the clock went back). b.mu is
// held.
func (b *RetryBudget) slot(now time.Time) *budgetSlot {
	epoch := b.epoch(now)
	s := &b.slots[window.Slot(epoch, budgetSlots)]
	if s.epoch != epoch {
		*s = budgetSlot{epoch: epoch}
	}
	return s
}

// available returns the tokens left at now. b.mu is held.
func (b *RetryBudget) available(now time.Time) float64 {
	epoch := b.epoch(now)
	var deposits, withdrawals float64
	for _, s := range b.slots {
		// A difference, not a comparison, so that epochs far apart
		// cannot overflow into the window.
		if d := epoch - s.epoch; d >= 0 && d < budgetSlots {
			deposits += s.deposits
			withdrawals += s.withdrawals
		}
	}
	return b.reserve() + b.ratio()*deposits - withdrawals
}

func newRetryBudget() *RetryBudget { return new(RetryBudget) }

// Deposit records a first attempt.
func (b *RetryBudget) Deposit(now time.Time) {
	b.mu.Lock()
	b.slot(now).deposits++
	b.mu.Unlock()
}

// Withdraw spends one retry if at least one token is left.
func (b *RetryBudget) Withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.available(now) < 1 {
		return false
	}
	b.slot(now).withdrawals++
	return true
}

// Refund gives back a retry that was withdrawn at the time at but never
// made (its wait was cut short, or a breaker refused it). Do, Transport and
// Stream call it with the time of the withdrawal, which may be a long wait
// ago. A withdrawal the budget has
// already forgotten (more than TTL ago) is not refunded: the deposits it
// was drawn against are forgotten too, and a refund now would make a token
// nobody deposited.
func (b *RetryBudget) Refund(at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	epoch := b.epoch(at)
	if s := &b.slots[window.Slot(epoch, budgetSlots)]; s.epoch == epoch && s.withdrawals >= 1 {
		s.withdrawals--
	}
}

// Available returns how many retries the budget would allow at now.
func (b *RetryBudget) Available(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(b.available(now), 0)
}
