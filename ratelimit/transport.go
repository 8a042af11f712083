package ratelimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/sse"
)

// Pacer paces calls to a provider's rate limits: Wait waits until one call
// of tokens may go (or returns ErrDeadline at once if that would be after
// ctx's deadline), and Learn reads each response's rate-limit headers.
// *Limiter is the in-memory Pacer; a Pacer kept elsewhere (reboundredis's
// Limiter shares one pace among the replicas of a service on Redis) fits
// the Transport the same way.
type Pacer interface {
	Wait(ctx context.Context, tokens int) error
	Learn(h http.Header)
}

// Transport makes every request wait its turn: a slot of the Adaptive
// limit, then the Limiter's pace. Put it under rebound.Transport, so that
// every attempt waits, retries included:
//
//	client := &http.Client{Transport: &rebound.Transport{
//		Base: &ratelimit.Transport{Limiter: limiter, Adaptive: adaptive},
//	}}
//
// It learns from every response's rate-limit headers, tells the Adaptive
// limit how each request went (429, 529, 503 and timeouts are congestion),
// and gives the slot back when the provider has answered: for an answer
// that is not an event stream, when the first byte of its body other than
// white space is read (a provider makes such an answer whole before it
// sends it, and may send spaces before it to keep the connection open),
// so that a caller that reads a large answer slowly, or not at all, holds
// no slot that other requests wait for; for an event stream, when its
// first content comes: the provider has admitted the request, and a
// stream that then stays open for minutes holds no slot either.
// rebound.Transport says when that is (its ContentArrived call); without it
// a stream holds its slot until it ends. A body closed or read to its end
// first gives the slot back then. It does not report latencies to
// the Adaptive limit: an LLM's latency follows the length of its answer
// (and its time to first content, the length of its prompt), so a slow
// answer is not a sign of a queue there (the simulator's provider, whose
// work is uniform, does report them); the limit hears only how each
// request went.
//
// A request whose deadline would pass while it waits for the Limiter
// fails at once with ErrDeadline, never sent. A request waits for its
// Adaptive slot as the Priority of its context (WithPriority; Interactive
// if unmarked), until a slot is its, its context ends, or MaxWait passes:
// a wait that runs out fails with ErrNoSlot, never sent.
type Transport struct {
	// Base sends the requests. Nil means http.DefaultTransport.
	Base http.RoundTripper
	// Limiter and Adaptive are optional; nil (a nil *Limiter included)
	// means no such limit.
	Limiter  Pacer
	Adaptive *Adaptive
	// Tokens estimates a request's token cost for the Limiter. Nil means
	// a cost of 1 per request (requests-per-minute only).
	Tokens func(*http.Request) int
	// MaxWait bounds how long a request waits for its Adaptive slot, in
	// real time. One that waits longer fails with ErrNoSlot marked
	// rebound.Permanent: the bound is the request's, and a retry would
	// only queue it again. Zero or less means no bound but the request's
	// context, whose deadline (an attempt timeout's included) ends the
	// wait with an error that is both ErrNoSlot and
	// context.DeadlineExceeded, and is retried as any timed-out attempt.
	MaxWait time.Duration
	// MaxPaceWait bounds how long a request waits for the Limiter's pace
	// (by this package's Limiter's clock, or in real time).
	// One the Limiter would hold longer fails at once with ErrOverPace
	// marked rebound.Permanent, never sent: the limits, as the provider's
	// headers announced them, have no room for it in time, and a retry
	// would only queue it again (another key's Transport may have room).
	// Zero or less means no bound but the request's context's deadline.
	MaxPaceWait time.Duration
}

// ErrOverPace is the error of a request the Limiter would have held
// longer than the Transport's MaxPaceWait: it was never sent.
var ErrOverPace = errors.New("ratelimit: the rate limits leave no room for the request within the wait allowed")

// paceBound is a request's context for its wait on the Limiter: its
// deadline is the earlier of the request's own and the end of the wait
// allowed, with no timer of its own, as the Limiter only reads the
// deadline to refuse a wait that would pass it.
type paceBound struct {
	context.Context
	deadline time.Time
}

func (b paceBound) Deadline() (time.Time, bool) { return b.deadline, true }

// waitPace waits for the Limiter's pace for a request of ctx.
func (t *Transport) waitPace(ctx context.Context, limiter Pacer, tokens int) error {
	if t.MaxPaceWait <= 0 {
		return limiter.Wait(ctx, tokens)
	}
	bound := time.Now().Add(t.MaxPaceWait)
	if own, ok := ctx.Deadline(); ok && !bound.Before(own) {
		return limiter.Wait(ctx, tokens) // the request's own deadline comes first
	}
	var err error
	if l, ok := limiter.(*Limiter); ok {
		err = l.waitUntil(ctx, tokens, l.now().Add(t.MaxPaceWait)) // by its own clock
	} else {
		err = limiter.Wait(paceBound{ctx, bound}, tokens)
	}
	if errors.Is(err, ErrDeadline) {
		return rebound.Permanent(ErrOverPace)
	}
	return err
}

// ErrNoSlot is the error of a request that waited for a slot of the
// Adaptive limit until its deadline or the Transport's MaxWait passed: it
// was never sent.
var ErrNoSlot = errors.New("ratelimit: no slot of the limit on requests in flight came free in time")

// RoundTrip implements http.RoundTripper. If Base or Tokens panics, the
// Adaptive slot taken for the request is given back (as Neutral) and the
// panic goes on unchanged.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	held := false // an Adaptive slot is taken and not yet handed on
	if t.Adaptive != nil {
		if err := t.acquire(ctx); err != nil {
			closeBody(req)
			return nil, err
		}
		held = true
		defer func() {
			if held {
				t.Adaptive.Release(Neutral)
			}
		}()
	}
	limiter := t.Limiter
	if l, ok := limiter.(*Limiter); ok && l == nil {
		limiter = nil // as it was when the field was a *Limiter
	}
	if limiter != nil {
		tokens := 1
		if t.Tokens != nil {
			tokens = t.Tokens(req)
		}
		if err := t.waitPace(ctx, limiter, tokens); err != nil {
			closeBody(req)
			return nil, err
		}
	}
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	resp, err := base.RoundTrip(req)
	if err != nil {
		if t.Adaptive != nil {
			held = false
			t.Adaptive.Release(signalOf(ctx, err, 0))
		}
		return nil, err
	}
	if limiter != nil {
		limiter.Learn(resp.Header)
	}
	if t.Adaptive != nil {
		held = false
		resp.Body = &releaseBody{ReadCloser: resp.Body, adaptive: t.Adaptive, signal: signalOf(ctx, nil, resp.StatusCode),
			made: !sse.IsStream(resp.Header)}
	}
	return resp, nil
}

// acquire waits for an Adaptive slot for a request of ctx, for at most
// MaxWait.
func (t *Transport) acquire(ctx context.Context) error {
	if t.MaxWait <= 0 {
		return noSlot(ctx, t.Adaptive.Acquire(ctx))
	}
	if t.Adaptive.TryAcquire() {
		return nil // no timer for a request that does not wait
	}
	wait, cancel := context.WithTimeout(ctx, t.MaxWait)
	defer cancel()
	err := t.Adaptive.Acquire(wait)
	if err != nil && ctx.Err() == nil && wait.Err() != nil {
		return rebound.Permanent(ErrNoSlot)
	}
	return noSlot(ctx, err)
}

// noSlot is err, Acquire's for a request of ctx, as the Transport returns
// it: a deadline that passed while the request waited is ErrNoSlot too.
func noSlot(ctx context.Context, err error) error {
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", ErrNoSlot, err)
	}
	return err
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// signalOf judges a finished request for the Adaptive limit.
func signalOf(ctx context.Context, err error, status int) Signal {
	switch {
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		// A deadline ran out while the provider worked on it (under
		// rebound.Transport, usually the attempt's own timeout): slow.
		return Congested
	case err != nil:
		return Neutral // the caller left, or the connection broke
	case status == http.StatusTooManyRequests || status == 529 || status == http.StatusServiceUnavailable:
		return Congested
	case status >= 400:
		return Neutral
	}
	return Success
}

// releaseBody gives the slot back once, when the body is closed or read to
// its end, whichever goroutine gets there first; or, for an answer made
// whole before it is sent (made), when its first byte other than white
// space is read.
type releaseBody struct {
	io.ReadCloser
	adaptive *Adaptive // its slot is released once, with signal
	signal   Signal
	made     bool // until the answer's first byte other than white space; Read's alone
	once     sync.Once
}

func (b *releaseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if answered := b.made && len(bytes.TrimLeft(p[:n], " \t\r\n")) > 0; answered || err != nil {
		b.made = false
		b.once.Do(b.release)
	}
	return n, err
}

// ContentArrived gives the slot back when an event stream's first content
// has come (see rebound.Transport).
func (b *releaseBody) ContentArrived() {
	b.once.Do(b.release)
}

// release gives the slot back; once.
func (b *releaseBody) release() { b.adaptive.Release(b.signal) }

func (b *releaseBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}
