// Package ratelimit keeps an agent inside its provider's limits, and sends
// less when the provider is struggling.
//
// A Limiter paces calls to a requests-per-minute and a tokens-per-minute
// limit (an LLM call's token cost is estimated before the call and
// corrected once its usage is known), and learns from the provider: its
// x-ratelimit-remaining-* / reset-* and anthropic-ratelimit-* headers slow
// the pace so that what is left of a quota lasts until it is replenished.
// It is built on golang.org/x/time/rate and has its shapes: Allow, Reserve,
// Wait.
//
// An Adaptive limit bounds how many calls are in flight, and moves the
// bound with the provider's health: a 429, an overload or a timeout cuts
// it, every success raises it a little (additive increase, multiplicative
// decrease, as TCP does). Calls beyond the bound wait in a first-in,
// first-out queue per Priority, and a waiting call whose deadline passes
// is dropped before it is sent: work a provider does for a caller who has
// left is the fuel of metastable failure. A call's context says its
// Priority (WithPriority): waiting Interactive calls, the default, go
// before waiting Batch calls, so a batch sharing the provider's quota
// takes what interactive users leave, and never fewer than one in
// MaxPassOver+1 of the slots that free while both wait, so it still ends.
//
// Transport puts both under rebound.Transport (or any http.Client), so
// every attempt waits its turn. Its Limiter is a Pacer: this package's
// Limiter, or one shared by the replicas of a service (reboundredis's, on
// Redis). Under rebound.Transport an event stream is in flight only until
// its first content (the provider has admitted it), so streams that stay
// open for minutes leave the limit to other calls and still tell it of
// each success; a request that waits for a slot past its deadline or the
// Transport's MaxWait fails with ErrNoSlot, never sent.
package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/internal/header"
	"github.com/rebound-go/rebound/internal/pace"
)

// ErrDeadline is the error of a call that would have to wait past its
// context's deadline: it is dropped at once instead.
var ErrDeadline = errors.New("ratelimit: the wait would pass the deadline")

// Config is a Limiter's limits. Its zero value limits nothing.
type Config struct {
	// RequestsPerMinute and TokensPerMinute are the limits; zero means
	// none. No 60 s window ever sees more than a limit: requests may come
	// in bursts of a second's worth and tokens of TokenBurst, and the
	// steady pace leaves room for them. A call of more tokens than the
	// burst is charged the burst.
	RequestsPerMinute, TokensPerMinute float64
	// TokenBurst is the most tokens that may go at once. Zero means ten
	// seconds' worth (TokensPerMinute/6); more than half the limit is cut
	// to half. The pace after a burst is (TokensPerMinute − TokenBurst) a
	// minute, so a smaller burst uses more of the limit over a long run:
	// two minutes of steady calls see 2·TokensPerMinute − TokenBurst
	// tokens. Set it to the largest call's tokens to keep the pace high.
	TokenBurst int
	// Clock is the time the limiter goes by: its pace, when a learned
	// quota resets, and what Wait sleeps on. Nil means the real clock,
	// and Wait then sleeps by its context's clock (rebound.WithClock), as
	// Do does; a simulation gives it the virtual clock its calls wait by.
	Clock rebound.Clock
}

// Limiter paces calls to requests- and tokens-per-minute limits, learning
// from the provider's rate-limit headers. It is safe for concurrent use.
type Limiter struct {
	now   func() time.Time // clock.Now, or time.Now
	clock rebound.Clock    // nil: Wait sleeps by its context's clock
	// requestsPace and tokensPace are the configured limits' paces.
	requestsPace, tokensPace pace.Pace

	mu       sync.Mutex    // guards the fields below
	requests *rate.Limiter // nil: no limit
	tokens   *rate.Limiter // nil: no limit
	// restoreAt is when a pace learned from headers ends and the
	// configured limits apply again; learnedAt is when it was last
	// learned.
	restoreAt, learnedAt time.Time

	announced pace.Announced // the quotas the headers announced, for Headroom
}

// New returns a Limiter for cfg.
func New(cfg Config) *Limiter {
	l := &Limiter{now: time.Now, clock: cfg.Clock,
		requestsPace: pace.Requests(cfg.RequestsPerMinute, time.Minute),
		tokensPace:   pace.Tokens(cfg.TokensPerMinute, cfg.TokenBurst, time.Minute),
	}
	if cfg.Clock != nil {
		l.now = cfg.Clock.Now
	}
	l.requests, l.tokens = l.configured()
	return l
}

// configured returns limiters of the configured paces, which never let
// more than a limit through in any 60 s window; nil for no limit.
func (l *Limiter) configured() (requests, tokens *rate.Limiter) {
	return limiter(l.requestsPace), limiter(l.tokensPace)
}

func limiter(p pace.Pace) *rate.Limiter {
	if p.Rate == 0 {
		return nil
	}
	return rate.NewLimiter(rate.Limit(p.Rate), p.Burst)
}

// Reservation is a Limiter's promise of one call of some tokens.
type Reservation struct {
	req, tok *rate.Reservation
	at       time.Time
	ok       bool
}

// OK reports whether the call can ever go (its tokens fit the limit).
func (r *Reservation) OK() bool { return r.ok }

// Delay is how long to wait before the call may go.
func (r *Reservation) Delay() time.Duration {
	var d time.Duration
	if r.req != nil {
		d = max(d, r.req.DelayFrom(r.at))
	}
	if r.tok != nil {
		d = max(d, r.tok.DelayFrom(r.at))
	}
	return d
}

// Cancel gives the reservation back, as far as it can still be.
func (r *Reservation) Cancel() {
	if r.req != nil {
		r.req.Cancel()
	}
	if r.tok != nil {
		r.tok.Cancel()
	}
}

// Reserve reserves one call of tokens (an estimate) now.
func (l *Limiter) Reserve(tokens int) *Reservation {
	r := l.reserve(tokens)
	return &r
}

// reserve is Reserve, its Reservation a value: a wait that keeps it to
// itself keeps it on the stack.
func (l *Limiter) reserve(tokens int) Reservation {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	l.restoreIfDue(now)
	r := Reservation{at: now, ok: true}
	defer func() {
		if r.ok {
			l.announced.Sent(tokens, now)
		}
	}()
	if l.requests != nil {
		r.req = l.requests.ReserveN(now, 1)
		r.ok = r.ok && r.req.OK()
	}
	if l.tokens != nil && tokens > 0 {
		r.tok = l.tokens.ReserveN(now, min(tokens, l.tokens.Burst()))
		r.ok = r.ok && r.tok.OK()
	}
	if !r.ok {
		r.Cancel()
	}
	return r
}

// Allow reports whether one call of tokens may go now, and if so counts
// it.
func (l *Limiter) Allow(tokens int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	// Both limits are checked before either is charged; l.mu keeps the
	// check and the charge together.
	if !l.ready(tokens, now) {
		return false
	}
	if l.tokens != nil && tokens > 0 {
		l.tokens.AllowN(now, min(tokens, l.tokens.Burst()))
	}
	if l.requests != nil {
		l.requests.AllowN(now, 1)
	}
	l.announced.Sent(tokens, now)
	return true
}

// Ready reports whether one call of tokens may go now, without waiting,
// and counts nothing: a caller with several keys asks it to keep a call
// on the key it prefers only while that key can take it at once.
func (l *Limiter) Ready(tokens int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ready(tokens, l.now())
}

// ready is Ready at now. l.mu is held.
func (l *Limiter) ready(tokens int, now time.Time) bool {
	l.restoreIfDue(now)
	if l.requests != nil && l.requests.TokensAt(now) < 1 {
		return false
	}
	return l.tokens == nil || tokens <= 0 || l.tokens.TokensAt(now) >= float64(min(tokens, l.tokens.Burst()))
}

// Wait waits until one call of tokens may go, or returns ErrDeadline at
// once if that would be after ctx's deadline, or ctx's error if it ends
// first.
func (l *Limiter) Wait(ctx context.Context, tokens int) error {
	deadline, _ := ctx.Deadline()
	return l.waitUntil(ctx, tokens, deadline)
}

// waitUntil is Wait with the deadline given apart from ctx's (zero: none),
// so that a Transport's MaxPaceWait costs no context.
func (l *Limiter) waitUntil(ctx context.Context, tokens int, deadline time.Time) error {
	r := l.reserve(tokens)
	if !r.OK() {
		return fmt.Errorf("ratelimit: %d tokens exceed the tokens-per-minute limit", tokens)
	}
	d := r.Delay()
	if d == 0 {
		return nil
	}
	if !deadline.IsZero() && d >= deadline.Sub(l.now()) {
		r.Cancel()
		return ErrDeadline
	}
	clock := l.clock
	if clock == nil {
		clock = callctx.ClockOf(ctx)
	}
	if err := clock.Sleep(ctx, d); err != nil {
		r.Cancel()
		return err
	}
	return nil
}

// Correct charges the difference between a call's estimated and actual
// tokens, once its usage is known. Tokens over the estimate are charged
// (they may delay later calls); tokens under it are not given back, which
// errs on the safe side.
func (l *Limiter) Correct(estimated, actual int) {
	if actual <= estimated {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tokens != nil {
		l.tokens.ReserveN(l.now(), min(actual-estimated, l.tokens.Burst()))
	}
}

// Learn reads a response's rate-limit headers: when the provider says how
// much of a quota is left and when it resets, the pace is slowed so that
// what is left lasts until the reset (never sped up beyond the configured
// limit); with nothing left, calls wait for the reset. Once the reset has
// passed, the configured limits apply again.
func (l *Limiter) Learn(h http.Header) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	rl, ok := header.RateLimits(h, now)
	if !ok {
		return
	}
	l.announced.Learn(rl, now)
	l.requests = learn(l.requests, rl.Requests, l.requestsPace, now, &l.restoreAt)
	l.tokens = learn(l.tokens, rl.Tokens, l.tokensPace, now, &l.restoreAt)
	l.learnedAt = now
}

// learn slows lim so that q.Remaining lasts until q.Reset.
func learn(lim *rate.Limiter, q header.Quota, configured pace.Pace, now time.Time, restoreAt *time.Time) *rate.Limiter {
	p, ok := pace.Learned(q, configured)
	if !ok {
		return lim
	}
	switch {
	case p.Rate == 0:
		// Nothing left: wait for the reset.
		if lim == nil {
			lim = rate.NewLimiter(0, 1)
		}
		lim.SetLimitAt(now, rate.Limit(1/q.Reset.Seconds()))
		lim.SetBurstAt(now, 1)
		lim.ReserveN(now, lim.Burst())
	case lim == nil:
		lim = limiter(p)
	default:
		lim.SetLimitAt(now, rate.Limit(p.Rate))
	}
	if until := now.Add(q.Reset); until.After(*restoreAt) {
		*restoreAt = until
	}
	return lim
}

// restoreIfDue puts the configured limits back once the learned pace has
// run its course, or once the clock has gone back to before it was
// learned (its end is then no longer known). l.mu is held.
func (l *Limiter) restoreIfDue(now time.Time) {
	if l.restoreAt.IsZero() || now.Before(l.restoreAt) && !now.Before(l.learnedAt) {
		return
	}
	l.restoreAt = time.Time{}
	l.requests, l.tokens = l.configured()
}
