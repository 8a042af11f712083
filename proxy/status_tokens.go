package proxy

import (
	"context"
	"math"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/observe"
)

// tokenTally adds up the tokens answers reported, as the access log
// counts them: every input token, of which those read from the
// provider's prompt cache and those written into it, and the output. The
// status page shows a key's over its window and a tenant's since the
// process started, and /metrics a tenant's. Sums stop at math.MaxInt64
// rather than wrap, so that no upstream's counts, however absurd, turn a
// figure negative.
type tokenTally struct{ input, cacheRead, cacheWrite, output int64 }

// add counts u.
func (t *tokenTally) add(u cost.Usage) {
	t.input = plus(t.input, plus(plus(u.InputTokens, u.CacheReadTokens), plus(u.CacheWriteTokens, u.CacheWrite1hTokens)))
	t.cacheRead = plus(t.cacheRead, u.CacheReadTokens)
	t.cacheWrite = plus(t.cacheWrite, plus(u.CacheWriteTokens, u.CacheWrite1hTokens))
	t.output = plus(t.output, u.OutputTokens)
}

// merge counts what o counted.
func (t *tokenTally) merge(o tokenTally) {
	t.input, t.cacheRead = plus(t.input, o.input), plus(t.cacheRead, o.cacheRead)
	t.cacheWrite, t.output = plus(t.cacheWrite, o.cacheWrite), plus(t.output, o.output)
}

// plus returns a+b, b taken as 0 if negative, at most math.MaxInt64; a
// is never negative.
func plus(a, b int64) int64 {
	if b = max(b, 0); a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// tokensJSON is a tally as /ui/status shows it, beside a key's or a
// tenant's other figures.
type tokensJSON struct {
	InputTokens      int64 `json:"input_tokens"` // every input token, those below included
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	OutputTokens     int64 `json:"output_tokens"`
	// CacheReadShare is CacheReadTokens / InputTokens; null without input.
	CacheReadShare *float64 `json:"cache_read_share"`
}

func (t tokenTally) json() tokensJSON {
	j := tokensJSON{InputTokens: t.input, CacheReadTokens: t.cacheRead, CacheWriteTokens: t.cacheWrite, OutputTokens: t.output}
	if t.input > 0 {
		share := min(float64(t.cacheRead)/float64(t.input), 1)
		j.CacheReadShare = &share
	}
	return j
}

// answered counts u, the usage of an answer r's key gave, in the bucket
// of now.
func (r *statusRow) answered(u cost.Usage) {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.bucket(time.Now()).tokens.add(u)
	r.mu.Unlock()
}

// addTokens counts u, the usage of an answer to one of t's requests.
func (t *tenant) addTokens(u cost.Usage) {
	t.mu.Lock()
	t.tokens.add(u)
	t.mu.Unlock()
}

// usageRecorder is an Observer that counts the tokens answers report
// (reboundotel.Observer's RecordUsage): the proxy tells it each answer's,
// under the target of the attempt that answered, as its events name it.
type usageRecorder interface {
	RecordUsage(ctx context.Context, target string, u cost.Usage)
}

// recordUsage tells p's Observer, if it is a usageRecorder, of u, the
// usage of the answer target gave.
func (p *Proxy) recordUsage(target string, u cost.Usage) {
	if ur, ok := p.observer.(usageRecorder); ok && target != "" {
		ur.RecordUsage(context.Background(), target, u)
	}
}

// recordOperation tells p's Observer, if it is an
// observe.OperationRecorder, of c, answered with status, as a GenAI
// client's operation: the provider its dialect names, the model the
// client named under its label (modelLabels: a made-up name is
// OtherModel, so that no client grows the series), how long it took, its
// tokens, and for a failure its status, or "broken" for an answer that
// broke off. c.mu is held.
func (p *Proxy) recordOperation(c *call, status int) {
	rec, ok := p.observer.(observe.OperationRecorder)
	if !ok {
		return
	}
	op := observe.Operation{Kind: "llm", Provider: providerName(c.dialect), Model: p.models.label(c.model), Duration: time.Since(c.start),
		Attempts: c.attempts, InputTokens: c.usage.InputAll(), OutputTokens: c.usage.OutputTokens}
	switch {
	case status >= 400:
		op.ErrorType = strconv.Itoa(status)
	case c.aborted:
		op.ErrorType = "broken"
	}
	rec.RecordOperation(context.Background(), op)
}

// providerName is gen_ai.provider.name of a dialect.
func providerName(dialect string) string {
	if dialect == DialectGemini {
		return "gcp.gemini"
	}
	return dialect
}
