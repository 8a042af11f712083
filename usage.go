package rebound

import (
	"context"
	"sync/atomic"
)

// Usage is what one attempt consumed, as the provider reported it.
type Usage struct {
	InputTokens, OutputTokens int64
}

// UsageRecorder collects the usage reported during one attempt; it is safe
// for concurrent use. The fallback package gives every attempt one, so
// that cost can be counted attempt by attempt, failures included.
type UsageRecorder struct {
	input, output atomic.Int64
}

// Usage returns the total reported so far.
func (r *UsageRecorder) Usage() Usage {
	return Usage{InputTokens: r.input.Load(), OutputTokens: r.output.Load()}
}

type usageKey struct{}

// WithUsageRecorder returns a context in which ReportUsage adds to r.
func WithUsageRecorder(ctx context.Context, r *UsageRecorder) context.Context {
	return context.WithValue(ctx, usageKey{}, r)
}

// ReportUsage adds u to the recorder of ctx, if it has one. An attempt
// function calls it with the usage the provider reported: for an answer,
// and for a failure that was billed.
func ReportUsage(ctx context.Context, u Usage) {
	if r, ok := ctx.Value(usageKey{}).(*UsageRecorder); ok {
		r.input.Add(u.InputTokens)
		r.output.Add(u.OutputTokens)
	}
}
