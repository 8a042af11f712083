package cost

import (
	"context"
	"sync/atomic"
)

// Usage is what one attempt consumed, as the provider reported it.
type Usage struct {
	InputTokens, OutputTokens int64
}

// Recorder collects the usage reported during one attempt; it is safe for
// concurrent use. The fallback package gives every attempt one, so that
// cost can be counted attempt by attempt, failures included.
type Recorder struct {
	input, output atomic.Int64
}

// Usage returns the total reported so far.
func (r *Recorder) Usage() Usage {
	return Usage{InputTokens: r.input.Load(), OutputTokens: r.output.Load()}
}

type recorderKey struct{}

// WithRecorder returns a context in which Report adds to r.
func WithRecorder(ctx context.Context, r *Recorder) context.Context {
	return context.WithValue(ctx, recorderKey{}, r)
}

// Report adds u to the recorder of ctx, if it has one. An attempt function
// calls it with the usage the provider reported: for an answer, and for a
// failure that was billed.
func Report(ctx context.Context, u Usage) {
	if r, ok := ctx.Value(recorderKey{}).(*Recorder); ok {
		r.input.Add(u.InputTokens)
		r.output.Add(u.OutputTokens)
	}
}
