// Package breaker is a circuit breaker for the targets an agent calls: one
// model for one kind of task, say "gpt-x:summarise".
//
// A Breaker is closed while the target works. It opens when the target
// keeps failing, by either of two rules: a number of failures in a row, or
// a failure rate over a rolling time window once the window has seen enough
// calls. While open it refuses calls without touching the network, with an
// error wrapping ErrOpen, so that a caller moves to a fallback at once
// instead of queuing behind a dead provider. After a cooldown it lets a
// bounded number of probes through (half-open); enough probe successes
// close it, one probe failure opens it again.
//
// Only failures the provider is to blame for count: transient,
// rate-limited and overloaded ones. A 400, an exhausted quota or the
// caller's own cancellation says nothing about the provider's health and
// moves nothing.
//
// A Breaker is used in two steps, Allow before an attempt and Done after
// it, so that a stream can be recorded when it ends rather than when it
// starts. It satisfies rebound.Breaker: set it as Policy.Breaker and Do
// and Transport consult it before every attempt. The closed path takes no
// lock and allocates nothing.
//
// A probe always ends. Do and Stream report an attempt that panics as a
// failure; a permit issued under an earlier state is ignored by Done, so it
// can neither free nor hold a probe slot; and a probe that has not
// reported back within Config.ProbeTimeout is forgotten, its slot given to
// the next call.
//
// A Set holds one Breaker per key, created on first use, bounded in size.
package breaker

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
)

// ErrOpen is the error an open breaker refuses a call with (wrapped in an
// *OpenError that says which breaker and until when).
var ErrOpen = errors.New("breaker: open")

// OpenError is a refusal by an open or half-open breaker.
type OpenError struct {
	Name  string
	State State
	// Until is when an open breaker will let a probe through; zero for a
	// half-open breaker whose probes are all in flight.
	Until time.Time
}

func (e *OpenError) Error() string {
	if e.State == HalfOpen {
		return fmt.Sprintf("breaker %q: half-open, probes in flight", e.Name)
	}
	return fmt.Sprintf("breaker %q: open until %s", e.Name, e.Until.Format(time.RFC3339))
}

// Unwrap returns ErrOpen.
func (e *OpenError) Unwrap() error { return ErrOpen }

// State is a breaker's state.
type State uint8

// States.
const (
	Closed State = iota
	Open
	HalfOpen
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("state(%d)", s)
}

// Defaults of a zero Config.
const (
	DefaultConsecutiveFailures = 5
	DefaultFailureRate         = 0.5
	DefaultWindow              = time.Minute
	DefaultMinCalls            = 20
	DefaultCooldown            = 30 * time.Second
	DefaultProbes              = 1
	DefaultSuccesses           = 2
)

// Config says when a breaker opens and how it recovers. Its zero value is
// a sensible breaker for an LLM API; each field documents its default.
type Config struct {
	// ConsecutiveFailures opens the breaker after this many failures in a
	// row. Zero means DefaultConsecutiveFailures (5); negative disables
	// the rule.
	ConsecutiveFailures int
	// FailureRate opens the breaker when the share of failures over
	// Window reaches it. Zero means DefaultFailureRate (0.5); negative
	// disables the rule.
	FailureRate float64
	// Window is the rolling window of the failure rate. Zero or negative
	// means DefaultWindow (60 s).
	Window time.Duration
	// MinCalls is how many calls the window must hold before the failure
	// rate counts. Zero or negative means DefaultMinCalls (20).
	MinCalls int
	// Cooldown is how long the breaker stays open before probing. Zero or
	// negative means DefaultCooldown (30 s).
	Cooldown time.Duration
	// Probes is how many calls may be in flight while half-open. Zero or
	// negative means DefaultProbes (1).
	Probes int
	// Successes is how many probe successes close the breaker. Zero or
	// negative means DefaultSuccesses (2).
	Successes int
	// ProbeTimeout is how long a probe may hold its slot without
	// reporting back (a stream body never closed, a caller that never
	// calls Done) before the slot is given to another call and the late
	// report, if it ever comes, is ignored. Zero or negative means
	// DefaultProbeTimeout (5 minutes; why: see there).
	ProbeTimeout time.Duration
	// OnStateChange, if set, is called after every change of state, on
	// the goroutine that caused it. It must not block or call back into
	// the breaker.
	OnStateChange func(Change)
	// Clock is the time the breaker goes by: when it opened, when its
	// cooldown ends, which stretch of the window a call falls in. Nil
	// means the real clock; a simulation gives it the virtual clock its
	// calls wait by. The breaker only reads it (Now), never sleeps on it.
	Clock rebound.Clock
}

// Change is a change of a breaker's state.
type Change struct {
	Name     string
	From, To State
	At       time.Time
	// Reason says why, e.g. "5 failures in a row".
	Reason string
}

// Notify returns an OnStateChange that reports every change to obs as a
// rebound.EventBreaker (the breaker's name as its Target, the state
// entered, and for an opening the Reason as its Err), so that the
// observers a Policy has (logs, metrics) hear of the breaker too:
//
//	b := breaker.New("gpt-x:summarise", breaker.Config{OnStateChange: breaker.Notify(obs)})
//
// Do and Transport do not report a breaker's changes themselves: a
// breaker serves every call and policy that shares it, so a change
// belongs to none of their observers, and the rebound.Breaker they
// consult does not tell them when it changes.
func Notify(obs rebound.Observer) func(Change) {
	return func(c Change) {
		e := rebound.Event{Type: rebound.EventBreaker, Target: c.Name, State: c.To.String()}
		if c.To == Open {
			e.Err = errors.New(c.Reason)
		}
		obs.Observe(e)
	}
}

// DefaultProbeTimeout is the ProbeTimeout of a zero Config: 5 minutes.
// A streamed probe legitimately lasts as long as the answer, seconds
// usually and minutes for a long one, and taking its slot too early costs
// little: one more probe to a target that may be recovering. A lost slot
// costs much more: with one probe, every call to the target is refused
// until it is reclaimed. Five minutes outlasts almost every answer and
// bounds the loss to ten default cooldowns.
const DefaultProbeTimeout = 5 * time.Minute

// Breaker is a circuit breaker. It is safe for concurrent use. Make one
// with New.
type Breaker struct {
	name string
	cfg  Config           // defaults applied
	now  func() time.Time // cfg.Clock.Now, or time.Now

	// state is the generation of the current state in its upper bits and
	// the State in its lowest two. A closed permit is the state itself,
	// so that the outcome of a call allowed under an earlier state is
	// told apart cheaply; a half-open permit is a probe's ticket with
	// HalfOpen in its lowest bits.
	state       atomic.Uint64
	consecutive atomic.Int64
	// openedAt is when the breaker last opened, in unix nanoseconds. Only
	// differences of it are used: they are exact for any two times
	// within 292 years of each other, even where UnixNano itself wraps
	// (before 1678, the zero time.Time among them).
	openedAt    atomic.Int64
	_           line
	pending     [stripes]stripe // successes not yet in the window
	window      [windowBuckets]bucket
	bucketWidth int64 // nanoseconds

	mu        sync.Mutex // serialises state changes; guards probes, successes and tickets
	probes    []probe    // half-open probes in flight, oldest first
	successes int        // half-open probe successes
	tickets   uint64     // the last probe ticket issued
}

// New returns a closed breaker named name (used in errors and events).
func New(name string, cfg Config) *Breaker {
	if cfg.ConsecutiveFailures == 0 {
		cfg.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if cfg.FailureRate == 0 {
		cfg.FailureRate = DefaultFailureRate
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MinCalls <= 0 {
		cfg.MinCalls = DefaultMinCalls
	}
	if cfg.Cooldown <= 0 {
		cfg.Cooldown = DefaultCooldown
	}
	if cfg.Probes <= 0 {
		cfg.Probes = DefaultProbes
	}
	if cfg.Successes <= 0 {
		cfg.Successes = DefaultSuccesses
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	b := &Breaker{name: name, cfg: cfg, now: time.Now, bucketWidth: max(int64(cfg.Window/windowBuckets), 1)}
	if cfg.Clock != nil {
		b.now = cfg.Clock.Now
	}
	for i := range b.window {
		b.window[i].epoch.Store(never)
	}
	return b
}

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// Config returns the breaker's Config, its defaults applied: what a
// breaker sharing this one's rules elsewhere (in Redis, say) goes by.
func (b *Breaker) Config() Config { return b.cfg }

// State returns the current state. An open breaker whose cooldown has
// passed reports Open until a call asks to go through.
func (b *Breaker) State() State { return State(b.state.Load() & 3) }

// Allow asks to make one attempt now. It returns a permit to hand back to
// Done, or an *OpenError.
func (b *Breaker) Allow() (rebound.Permit, error) {
	if s := b.state.Load(); State(s&3) == Closed {
		return rebound.Permit(s), nil
	}
	return b.allowProbe()
}

// Done reports how an attempt allowed with permit p ended.
func (b *Breaker) Done(p rebound.Permit, o rebound.Outcome) {
	if State(p&3) == HalfOpen {
		b.doneProbe(uint64(p)>>2, o)
		return
	}
	s := b.state.Load()
	if uint64(p) != s {
		// Allowed under an earlier state: the outcome no longer describes
		// the present.
		return
	}
	b.doneClosed(s, o)
}

func (b *Breaker) doneClosed(s uint64, o rebound.Outcome) {
	switch o {
	case rebound.OutcomeSuccess:
		if b.consecutive.Load() != 0 {
			b.consecutive.Store(0)
		}
		i := rand.Uint32() % stripes
		if b.pending[i].successes.Add(1) >= clockEvery {
			b.flushStripe(b.bucket(b.epochAt(b.now())), i)
		}
	case rebound.OutcomeFailure:
		now := b.now()
		b.flush(b.epochAt(now))
		b.bucket(b.epochAt(now)).stripes[rand.Uint32()%stripes].failures.Add(1)
		n := b.consecutive.Add(1)
		if c := b.cfg.ConsecutiveFailures; c > 0 && n >= int64(c) {
			b.transition(s, Open, now, fmt.Sprintf("%d failures in a row", n))
			return
		}
		if b.cfg.FailureRate > 0 {
			calls, failures := b.counts(now)
			if calls >= int64(b.cfg.MinCalls) && float64(failures) >= b.cfg.FailureRate*float64(calls) {
				b.transition(s, Open, now, fmt.Sprintf("%d of %d calls failed in %v", failures, calls, b.cfg.Window))
			}
		}
	}
}

// transition moves the breaker from state s to `to`, unless another
// goroutine already moved it.
func (b *Breaker) transition(s uint64, to State, now time.Time, reason string) {
	b.mu.Lock()
	if b.state.Load() != s {
		b.mu.Unlock()
		return
	}
	b.move(s, to, now)
	b.mu.Unlock()
	b.notify(State(s&3), to, now, reason)
}

// move moves the breaker from state s to `to`, in a new generation. b.mu
// is held.
func (b *Breaker) move(s uint64, to State, now time.Time) {
	switch to {
	case Open:
		b.openedAt.Store(now.UnixNano())
	case Closed:
		b.consecutive.Store(0)
		b.clearWindow()
	}
	b.probes = b.probes[:0]
	b.successes = 0
	b.state.Store((s>>2+1)<<2 | uint64(to))
}

// notify tells OnStateChange of a change, with b.mu not held.
func (b *Breaker) notify(from, to State, now time.Time, reason string) {
	if f := b.cfg.OnStateChange; f != nil {
		f(Change{Name: b.name, From: from, To: to, At: now, Reason: reason})
	}
}
