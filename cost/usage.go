package cost

import (
	"context"
	"sync/atomic"
)

// Usage is what one attempt consumed, as the provider reported it, by
// how it is billed.
type Usage struct {
	// InputTokens is the input read afresh: neither read from the
	// provider's prompt cache nor written into it.
	InputTokens int64
	// OutputTokens is the output, thoughts included.
	OutputTokens int64
	// CacheReadTokens is the input read from the cache;
	// CacheWriteTokens that written into it (for five minutes, or for as
	// long as the provider keeps it when it does not say),
	// CacheWrite1hTokens for an hour.
	CacheReadTokens, CacheWriteTokens, CacheWrite1hTokens int64
}

// InputAll is every input token, however billed.
func (u Usage) InputAll() int64 {
	return u.InputTokens + u.CacheReadTokens + u.CacheWriteTokens + u.CacheWrite1hTokens
}

// Recorder collects the usage reported during one attempt; it is safe for
// concurrent use. The fallback package gives every attempt one, so that
// cost can be counted attempt by attempt, failures included; so do spend
// caps (WithCaps).
type Recorder struct {
	input, output, read, write, write1h atomic.Int64
	outer                               *Recorder // the recorder of the context it was given in, which hears the same reports
}

// Usage returns the total reported so far.
func (r *Recorder) Usage() Usage {
	return Usage{InputTokens: r.input.Load(), OutputTokens: r.output.Load(),
		CacheReadTokens: r.read.Load(), CacheWriteTokens: r.write.Load(), CacheWrite1hTokens: r.write1h.Load()}
}

type recorderKey struct{}

// WithRecorder returns a context in which Report adds to r, and to the
// recorders of the contexts ctx is within: a fallback chain's trail and a
// spend cap hear the same report. A Recorder is given to one context.
func WithRecorder(ctx context.Context, r *Recorder) context.Context {
	r.outer, _ = ctx.Value(recorderKey{}).(*Recorder)
	return context.WithValue(ctx, recorderKey{}, r)
}

// Report adds u to the recorder of ctx, if it has one. An attempt function
// calls it with the usage the provider reported: for an answer, and for a
// failure that was billed.
func Report(ctx context.Context, u Usage) {
	r, _ := ctx.Value(recorderKey{}).(*Recorder)
	for ; r != nil; r = r.outer {
		r.input.Add(u.InputTokens)
		r.output.Add(u.OutputTokens)
		r.read.Add(u.CacheReadTokens)
		r.write.Add(u.CacheWriteTokens)
		r.write1h.Add(u.CacheWrite1hTokens)
	}
}
