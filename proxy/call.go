package proxy

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cache"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/relay"
	"github.com/rebound-go/rebound/internal/scrub"
)

// call is what the proxy knows of one request, for its access log line.
type call struct {
	start time.Time
	// client is the client's request, whose own credentials are scrubbed
	// from the error the line may carry: found only then (scrub.Of).
	client *http.Request
	method string
	path   string
	model  string
	// batchModels are the models of a batch's requests, beside model;
	// unseenModel says the request may run a model it does not name.
	batchModels []string
	unseenModel bool
	jsonBody    bool // the body was read as JSON (readModels)
	dialect     string
	route       string
	rt          *route
	body        *heldBody
	tenant      *tenant // nil: no tenants configured
	// refusal is why the tenant's limits refused the request, plus one;
	// estimate is the tokens its rate limit was charged.
	refusal  refusal
	estimate int

	// Set by the forwarder, on the handler's goroutine.
	upstream   string
	tried      int      // upstreams tried
	skipped    []string // upstreams skipped, cooling down after a quota
	slotWaited bool     // an upstream had no slot of its limit on requests in flight in time
	stream     bool     // the answer is a stream

	outcome string // why the proxy answered itself
	aborted bool   // the response broke off as the upstream's did, or ended on its error event
	err     error

	mu       sync.Mutex // guards the fields below: the events may come from a stream's reader
	attempts int
	unjudged int // failed attempts whose verdict has not come yet
	kinds    []string
	next     rebound.Observer // the Observer of the upstream being called
	row      *statusRow       // the status page's row of the upstream and key being called
	target   string           // the target of the attempt that answered, as its events name it
	usage    cost.Usage       // what the answer reported it used, once read; zero: nothing reported
	costUSD  float64          // what the attempts cost, when priced
	priced   bool

	// cached is what the route's cache did (cache.Outcome), plus one;
	// saved the usage of an answer it served.
	cached cache.Outcome
	saved  cost.Usage

	ctx callCtx // the context the request is forwarded under (within)
}

// within returns parent carrying c (callKey): the context c's request is
// forwarded under.
func (c *call) within(parent context.Context) context.Context {
	c.ctx = callCtx{Context: parent, c: c}
	return &c.ctx
}

// callCtx is a context carrying a *call, and the mark that has a
// stream's error event after content handed on (relay.HandOnErrorKey),
// held in the call itself: context.WithValue would take an allocation of
// its own.
type callCtx struct {
	context.Context
	c *call
}

func (x *callCtx) Value(key any) any {
	switch key {
	case callKey{}:
		return x.c
	case relay.HandOnErrorKey{}:
		// The client's SDK raises the provider's error from a stream's
		// error event after content, which it must then have.
		return true
	}
	return x.Context.Value(key)
}

// tokens notes the usage the answer reported (final or not: what was seen).
func (c *call) tokens(u cost.Usage, _ bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if u != (cost.Usage{}) {
		c.usage = u
	}
}

// Observe notes the attempts and verdicts of c's upstreams for the access
// line and the status page, and passes every event on to the Observer of the upstream being
// called (the chain's, and then the metrics').
func (c *call) Observe(e rebound.Event) {
	c.mu.Lock()
	judged := false
	switch e.Type {
	case rebound.EventAttempt:
		c.attempts++
		if e.Err != nil {
			c.unjudged++
		}
	case rebound.EventRetry, rebound.EventGiveUp:
		// The verdict on the attempt that failed last; a give-up with
		// none (a breaker's refusal) says nothing of an attempt.
		if c.unjudged > 0 {
			c.unjudged--
			c.kinds = append(c.kinds, e.Verdict.Kind.String())
			judged = true
		}
	}
	next, row := c.next, c.row
	c.mu.Unlock()
	row.note(e, judged, c.route)
	if next != nil {
		next.Observe(e)
	}
}

// observe makes c the Observer of the call to the next upstream, whose
// own Observer is next and whose figures go to row.
func (c *call) observe(next rebound.Observer, row *statusRow) rebound.Observer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next, c.row = next, row
	return c
}

// noKinds is the kinds of a call with no failed attempt: a list, empty,
// boxed once.
var noKinds any = []string{}

// logCall writes the access log line of c, answered with status: kind
// ("llm": a model call, as rebound mcp's lines are "mcp"), method,
// path, route, upstream, model (as the client named it), attempts, kinds
// (the verdict of each failed attempt: a list, empty when the first
// attempt answered), status and latency_ms always; stream (true for an
// answer streamed: an event stream, or Gemini's streamGenerateContent),
// the tokens the answer reported (none when it reported none, as an
// OpenAI stream without stream_options.include_usage), tenant (its name,
// with tenants configured) and tenant_cap_usd (a capped tenant's cap),
// cost_usd (what the attempts cost, as the tenant's cap settled them, or
// priced from the tokens by the config's prices), cache and saved_usd
// (cacheAttrs), upstreams_tried,
// skipped, outcome, broken and error when there is something to say. It
// carries no header, body, key or prompt; an error is scrubbed of every
// credential the proxy knows and of anything shaped like one.
func (p *Proxy) logCall(c *call, status int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var kinds any = c.kinds
	if c.kinds == nil {
		kinds = noKinds
	}
	// Room for every attribute a line can have, on the stack: appending
	// past the nine always there would otherwise move them to the heap.
	attrs := make([]slog.Attr, 0, 24)
	attrs = append(attrs,
		slog.String("kind", "llm"),
		slog.String("method", c.method),
		slog.String("path", c.path),
		slog.String("route", c.route),
		slog.String("upstream", c.upstream),
		slog.String("model", c.model),
		slog.Int("attempts", c.attempts),
		slog.Any("kinds", kinds),
		slog.Int("status", status),
		slog.Float64("latency_ms", float64(time.Since(c.start).Microseconds())/1000),
	)
	if c.stream {
		attrs = append(attrs, slog.Bool("stream", true))
	}
	if u := c.usage; u != (cost.Usage{}) {
		// input_tokens counts every input token, of which those read from
		// the provider's cache, and those written into it, are told apart.
		attrs = append(attrs, slog.Int64("input_tokens", u.InputAll()), slog.Int64("output_tokens", u.OutputTokens))
		if u.CacheReadTokens > 0 || u.CacheWriteTokens+u.CacheWrite1hTokens > 0 {
			attrs = append(attrs, slog.Int64("cache_read_tokens", u.CacheReadTokens), slog.Int64("cache_write_tokens", u.CacheWriteTokens+u.CacheWrite1hTokens))
		}
		// The key that answered (c.row: usage is watched only on an
		// answer, which ends the chain) and the Observer count them too.
		c.row.answered(u)
		p.recordUsage(c.target, u)
	}
	p.settleCall(c, status)
	p.recordOperation(c, status)
	c.tenantAttrs(func(key string, v any) { attrs = append(attrs, slog.Any(key, v)) })
	attrs = p.cacheAttrs(c, attrs)
	if c.tried > 1 {
		attrs = append(attrs, slog.Int("upstreams_tried", c.tried))
	}
	if len(c.skipped) > 0 {
		attrs = append(attrs, slog.Any("skipped", c.skipped))
	}
	if c.outcome != "" {
		attrs = append(attrs, slog.String("outcome", c.outcome))
	}
	if c.aborted {
		attrs = append(attrs, slog.Bool("broken", true))
		c.row.broke()
	}
	if c.err != nil {
		attrs = append(attrs, slog.String("error", p.secrets.String(scrub.Of(c.client).String(c.err.Error()))))
	}
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}
