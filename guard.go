package rebound

import (
	"context"
	"net/http"
)

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

// admit asks ctx's Guard, if any, to admit an attempt with req (nil in Do
// and Stream); without a Guard the attempt goes under ctx, and end does
// nothing. A refusal is an outcome the engine stops on.
func admit(ctx context.Context, req *http.Request) (context.Context, func(*http.Response, error), *outcome) {
	g := guardFrom(ctx)
	if g == nil {
		return ctx, noEnd, nil
	}
	actx, end, err := g.Admit(ctx, req)
	if err != nil {
		return ctx, noEnd, &outcome{err: err, refused: true}
	}
	return actx, end, nil
}

func noEnd(*http.Response, error) {}
