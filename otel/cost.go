package reboundotel

import (
	"context"
	"math"

	"go.opentelemetry.io/otel/metric"

	"github.com/rebound-go/rebound/cost"
)

// RecordTask prices each attempt of task under prices (as cost.Table.Spend
// does) and adds it to rebound.cost.usd, and the attempts that produced
// nothing to rebound.cost.wasted.usd too, by target; and counts each
// attempt's tokens in rebound.tokens, as RecordUsage does. Call it with
// what is given to cost.Ledger.Add.
func (o *Observer) RecordTask(ctx context.Context, prices cost.Table, task cost.Task) {
	for _, a := range task.Attempts {
		o.RecordUsage(ctx, a.Target, a.Usage)
		usd := prices[a.Target].Of(a.Usage)
		if !(usd > 0) {
			continue
		}
		opt := metric.WithAttributes(keyTarget.String(a.Target))
		o.cost.Add(ctx, usd, opt)
		if !a.Answered {
			o.wasted.Add(ctx, usd, opt)
		}
	}
}

// RecordUsage counts u, the tokens a provider reported for an attempt on
// target, in rebound.tokens by gen_ai.token.type: input (every input
// token, those read from the cache or written into it included, as the
// GenAI conventions count gen_ai.usage.input_tokens), output, and of the
// input, cache_read and cache_write (for five minutes and for an hour). A
// type without tokens, or with a negative count, adds nothing. rebound's
// events carry no usage: rebound proxy calls it with each answer's, and
// RecordTask with each attempt's.
func (o *Observer) RecordUsage(ctx context.Context, target string, u cost.Usage) {
	write := sum(u.CacheWriteTokens, u.CacheWrite1hTokens)
	counts := [tokenTypes]int64{
		tokenInput:      sum(sum(u.InputTokens, u.CacheReadTokens), write),
		tokenOutput:     u.OutputTokens,
		tokenCacheRead:  u.CacheReadTokens,
		tokenCacheWrite: write,
	}
	var ta *targetAttrs
	for typ, n := range counts {
		if n <= 0 {
			continue
		}
		if ta == nil {
			ta = o.attrsOf(target)
		}
		o.tokens.Add(ctx, n, ta.measure(instTokens, uint8(typ), 0).add...)
	}
}

// sum returns a+b, a negative count taken as none, at most math.MaxInt64.
func sum(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
