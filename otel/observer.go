package reboundotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/internal/lru"
)

// ScopeName is the instrumentation scope of the Observer's meter and
// tracer.
const ScopeName = "github.com/rebound-go/rebound/otel"

// Config says where an Observer sends what it measures.
type Config struct {
	// MeterProvider makes the Observer's instruments. Nil means the
	// global one, otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the Observer's spans. Nil means the global
	// one, otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// OmitErrorMessages keeps even rebound's own, scrubbed error messages
	// out of span statuses: only error types and codes are recorded.
	OmitErrorMessages bool
}

// Observer records rebound's events as OpenTelemetry metrics and spans. It
// implements rebound.CallObserver; set it as rebound.Policy.Observer. It is
// safe for concurrent use, and one Observer serves any number of policies
// and calls.
type Observer struct {
	tracer      trace.Tracer
	omitMessage bool

	attempts       metric.Int64Counter
	retries        metric.Int64Counter
	giveUps        metric.Int64Counter
	hedges         metric.Int64Counter
	restarts       metric.Int64Counter
	waits          metric.Float64Histogram
	calls          metric.Float64Histogram
	budget         metric.Float64Gauge
	breakerState   metric.Int64Gauge
	breakerChanges metric.Int64Counter
	limiterDelay   metric.Float64Histogram
	cost           metric.Float64Counter
	wasted         metric.Float64Counter
	tokens         metric.Int64Counter
	cacheServed    metric.Int64Counter
	genaiDuration  metric.Float64Histogram
	genaiTokens    metric.Int64Histogram
	mcpDuration    metric.Float64Histogram

	targets lru.Map[string, *targetAttrs] // the targets measured most recently
}

// Buckets of the duration histograms, in seconds. Calls use the GenAI
// client convention's boundaries; waits and limiter delays span rebound's
// backoff, from immediate retries to MaxServerWait.
var (
	callBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	waitBuckets = []float64{0, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 30, 60}
)

// New returns an Observer that records to cfg's providers. Instruments
// that a provider fails to make are replaced by no-op ones, and the
// failure is reported to otel.Handle.
func New(cfg Config) *Observer {
	mp, tp := cfg.MeterProvider, cfg.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(ScopeName)
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	o := &Observer{tracer: tp.Tracer(ScopeName), omitMessage: cfg.OmitErrorMessages}
	var err error
	o.attempts, err = m.Int64Counter("rebound.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts made, by outcome and, for failures, verdict kind."))
	check(err)
	o.retries, err = m.Int64Counter("rebound.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Retries scheduled, by the kind of failure retried."))
	check(err)
	o.giveUps, err = m.Int64Counter("rebound.give_ups", metric.WithUnit("{call}"),
		metric.WithDescription("Calls that stopped without success, by reason."))
	check(err)
	o.hedges, err = m.Int64Counter("rebound.hedges", metric.WithUnit("{hedge}"),
		metric.WithDescription("Hedges started beside attempts slow to their first token."))
	check(err)
	o.restarts, err = m.Int64Counter("rebound.restarts", metric.WithUnit("{restart}"),
		metric.WithDescription("Restarts of the server behind a target after it went down."))
	check(err)
	o.waits, err = m.Float64Histogram("rebound.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Waits before retries."), metric.WithExplicitBucketBoundaries(waitBuckets...))
	check(err)
	o.calls, err = m.Float64Histogram("rebound.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Calls from start to success or give-up, every attempt and wait included."),
		metric.WithExplicitBucketBoundaries(callBuckets...))
	check(err)
	o.budget, err = m.Float64Gauge("rebound.retry_budget.available", metric.WithUnit("{retry}"),
		metric.WithDescription("Retries the target's retry budget allowed when last asked."))
	check(err)
	o.breakerState, err = m.Int64Gauge("rebound.breaker.state", metric.WithUnit("{state}"),
		metric.WithDescription("A circuit breaker's state: 0 closed, 1 half-open, 2 open."))
	check(err)
	o.breakerChanges, err = m.Int64Counter("rebound.breaker.changes", metric.WithUnit("{change}"),
		metric.WithDescription("Changes of a circuit breaker's state, by the state entered."))
	check(err)
	o.limiterDelay, err = m.Float64Histogram("rebound.limiter.delay", metric.WithUnit("s"),
		metric.WithDescription("Delays a rate limiter imposed before requests."), metric.WithExplicitBucketBoundaries(waitBuckets...))
	check(err)
	o.cost, err = m.Float64Counter("rebound.cost.usd", metric.WithUnit("{USD}"),
		metric.WithDescription("What calls cost, in US dollars."))
	check(err)
	o.wasted, err = m.Float64Counter("rebound.cost.wasted.usd", metric.WithUnit("{USD}"),
		metric.WithDescription("What attempts that produced nothing cost, in US dollars."))
	check(err)
	o.tokens, err = m.Int64Counter("rebound.tokens", metric.WithUnit("{token}"),
		metric.WithDescription("Tokens the provider reported, by type: input (cached included), output, and of the input cache_read and cache_write."))
	check(err)
	o.cacheServed, err = m.Int64Counter("rebound.cache.served", metric.WithUnit("{answer}"),
		metric.WithDescription("Answers served from a cache (rebound.Transport's Cache), by rebound.cache: hit or stale."))
	check(err)
	o.genaiDuration, err = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."), metric.WithExplicitBucketBoundaries(genaiDurationBuckets...))
	check(err)
	o.genaiTokens, err = m.Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."), metric.WithExplicitBucketBoundaries(genaiTokenBuckets...))
	check(err)
	o.mcpDuration, err = m.Float64Histogram("mcp.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("The duration of the MCP request or notification as observed on the sender from the time it was sent until the response or ack is received."),
		metric.WithExplicitBucketBoundaries(genaiDurationBuckets...))
	check(err)
	if len(errs) > 0 {
		otel.Handle(errors.Join(errs...))
	}
	return o
}

// Observe implements rebound.Observer. Called directly, rather than on the
// per-call observer that ObserveCall returns, it records metrics only, and
// a failed attempt's verdict kind is rebound.Classify's.
func (o *Observer) Observe(e rebound.Event) {
	ctx, ta := context.Background(), o.attrsOf(e.Target)
	if e.Type == rebound.EventAttempt {
		if e.Err == nil {
			o.attempted(ctx, ta, false, 0)
		} else {
			o.attempted(ctx, ta, true, rebound.Classify(e.Err).Kind)
		}
	}
	o.record(ctx, ta, e)
}

// ObserveCall implements rebound.CallObserver: it starts the call's span
// as a child of ctx's and returns the observer of the call's events.
func (o *Observer) ObserveCall(ctx context.Context) rebound.Observer {
	clock := callctx.ClockOf(ctx)
	c := &call{o: o, ta: o.attrsOf(callctx.Target(ctx))}
	opts := c.ta.start
	if clock != realTime {
		// Virtual time: every timestamp comes from the call's clock.
		c.start = clock.Now()
		c.ctx, c.span = o.tracer.Start(ctx, "rebound.call", append(opts[:len(opts):len(opts)], trace.WithTimestamp(c.start))...)
	} else {
		// Real time: the clock is read only for a span that records.
		c.ctx, c.span = o.tracer.Start(ctx, "rebound.call", opts...)
		if c.span.IsRecording() {
			c.start = clock.Now()
		}
	}
	c.attemptStart = c.start
	return c
}

// realTime is rebound's real clock, what a context without WithClock
// has.
var realTime = callctx.Real

// attempted counts an attempt.
func (o *Observer) attempted(ctx context.Context, ta *targetAttrs, failed bool, kind rebound.Kind) {
	if failed {
		o.attempts.Add(ctx, 1, ta.measure(instAttempts, 1, uint8(kind)+1).add...)
	} else {
		o.attempts.Add(ctx, 1, ta.measure(instAttempts, 0, 0).add...)
	}
}

// record updates the metrics that an event alone determines: all but the
// attempts counter.
func (o *Observer) record(ctx context.Context, ta *targetAttrs, e rebound.Event) {
	switch e.Type {
	case rebound.EventAttempt:
		if e.Err == nil {
			o.calls.Record(ctx, e.Elapsed.Seconds(), ta.measure(instCalls, 0, 0).rec...)
		}
	case rebound.EventRetry:
		o.retries.Add(ctx, 1, ta.measure(instRetries, uint8(e.Verdict.Kind), 0).add...)
		o.waits.Record(ctx, max(e.Wait, 0).Seconds(), ta.measure(instWaits, uint8(e.Verdict.Kind), 0).rec...)
		o.budgetLeft(ctx, ta, e)
	case rebound.EventHedge:
		o.hedges.Add(ctx, 1, ta.measure(instHedges, 0, 0).add...)
	case rebound.EventRestart:
		o.restarts.Add(ctx, 1, metric.WithAttributes(keyTarget.String(e.Target)))
	case rebound.EventBreaker:
		o.breakerEntered(ctx, e.Target, e.State)
	case rebound.EventGiveUp:
		o.giveUps.Add(ctx, 1, ta.measure(instGiveUps, uint8(e.Reason), verdictOf(e)).add...)
		o.calls.Record(ctx, e.Elapsed.Seconds(), ta.measure(instCalls, 1, 0).rec...)
		o.budgetLeft(ctx, ta, e)
	case rebound.EventCacheHit, rebound.EventCacheStale:
		o.cacheServed.Add(ctx, 1, metric.WithAttributes(keyTarget.String(e.Target), cacheValue(e)))
	}
}

// cacheValue is rebound.cache for an answer served from a cache.
func cacheValue(e rebound.Event) attribute.KeyValue {
	if e.Type == rebound.EventCacheHit {
		return cacheHit
	}
	return cacheStale
}

func (o *Observer) budgetLeft(ctx context.Context, ta *targetAttrs, e rebound.Event) {
	if e.BudgetLeft >= 0 {
		o.budget.Record(ctx, e.BudgetLeft, ta.measure(instBudget, 0, 0).rec...)
	}
}

// verdictOf returns a give-up's verdict kind plus one, or 0 when the call
// stopped before any failure was judged (a refused first attempt, an
// invalid policy).
func verdictOf(e rebound.Event) uint8 {
	if e.Reason == rebound.StopInvalidPolicy || (e.Reason == rebound.StopBreakerOpen && e.Attempt == 0) {
		return 0
	}
	return uint8(e.Verdict.Kind) + 1
}

// RecordLimiterDelay records a delay that a rate limiter imposed on a
// request to target (a ratelimit.Reservation's Delay, say).
func (o *Observer) RecordLimiterDelay(ctx context.Context, target string, d time.Duration) {
	o.limiterDelay.Record(ctx, max(d, 0).Seconds(), metric.WithAttributes(keyTarget.String(target)))
}

// RecordCost adds usd US dollars spent on target to rebound.cost.usd.
// Amounts that are not positive are ignored.
func (o *Observer) RecordCost(ctx context.Context, target string, usd float64) {
	if usd > 0 {
		o.cost.Add(ctx, usd, metric.WithAttributes(keyTarget.String(target)))
	}
}

// call is the observer of one call: it holds the call's span and the
// attempt that has failed but whose verdict has not yet come.
type call struct {
	o     *Observer
	ctx   context.Context // carries span
	span  trace.Span
	start time.Time

	ta           *targetAttrs // the target's attributes
	attemptStart time.Time    // when the next attempt began
	ended        bool

	pending    bool // a failed attempt awaits its verdict
	pendNumber int
	pendErr    error
	pendEnd    time.Time
}

// at returns the time of an event that happened elapsed after the call
// started.
func (c *call) at(elapsed time.Duration) time.Time { return c.start.Add(elapsed) }

// Observe implements rebound.Observer.
func (c *call) Observe(e rebound.Event) {
	if c.ended {
		if e.Type == rebound.EventCacheStale || e.Type == rebound.EventCacheHit {
			// Served after the call ended (a stale answer in place of
			// its give-up): counted, the span shows the failure.
			c.o.record(c.ctx, c.o.attrsOf(e.Target), e)
		}
		return
	}
	if e.Target != c.ta.target {
		c.ta = c.o.attrsOf(e.Target)
	}
	switch e.Type {
	case rebound.EventAttempt:
		if c.pending { // cannot happen with rebound's loops: judge it as Observe does
			c.judged(rebound.Classify(c.pendErr).Kind, true)
		}
		if e.Err == nil {
			c.o.attempted(c.ctx, c.ta, false, 0)
			c.attemptSpan(e.Attempt, c.at(e.Elapsed), nil, 0, false)
			c.o.record(c.ctx, c.ta, e)
			c.end(e, nil)
			return
		}
		c.pending, c.pendNumber, c.pendErr, c.pendEnd = true, e.Attempt, e.Err, c.at(e.Elapsed)
	case rebound.EventRetry:
		c.judged(e.Verdict.Kind, true)
		c.o.record(c.ctx, c.ta, e)
		now := c.at(e.Elapsed)
		if c.span.IsRecording() {
			attrs := make([]attribute.KeyValue, 0, 4)
			attrs = append(attrs, keyWait.Float64(max(e.Wait, 0).Seconds()), keyAttempt.Int(e.Attempt),
				kindValues[kindIndex(e.Verdict.Kind)])
			if e.Verdict.HasServerWait {
				attrs = append(attrs, keyServerWait.Float64(e.Verdict.ServerWait.Seconds()))
			}
			c.span.AddEvent("rebound.wait", trace.WithTimestamp(now), trace.WithAttributes(attrs...))
		}
		c.attemptStart = now.Add(max(e.Wait, 0))
	case rebound.EventHedge:
		c.o.record(c.ctx, c.ta, e)
		if c.span.IsRecording() {
			c.span.AddEvent("rebound.hedge", trace.WithTimestamp(c.at(e.Elapsed)), trace.WithAttributes(keyAttempt.Int(e.Attempt)))
		}
	case rebound.EventGiveUp:
		c.judged(e.Verdict.Kind, verdictOf(e) != 0)
		c.o.record(c.ctx, c.ta, e)
		c.end(e, e.Err)
	case rebound.EventCacheHit, rebound.EventCacheStale:
		// The answer came from the cache, no attempt made (or none
		// reported): the call ends with it.
		c.o.record(c.ctx, c.ta, e)
		c.end(e, nil)
	}
}

// judged records the pending failed attempt, now that its verdict is
// known.
func (c *call) judged(kind rebound.Kind, hasKind bool) {
	if !c.pending {
		return
	}
	c.pending = false
	if hasKind {
		c.o.attempted(c.ctx, c.ta, true, kind)
	} else {
		c.o.attempts.Add(c.ctx, 1, c.ta.measure(instAttempts, 1, 0).add...)
	}
	c.attemptSpan(c.pendNumber, c.pendEnd, c.pendErr, kind, hasKind)
	c.pendErr = nil
}

// attemptSpan records one attempt's span, from c.attemptStart to end.
func (c *call) attemptSpan(n int, end time.Time, err error, kind rebound.Kind, hasKind bool) {
	if !c.span.IsRecording() {
		return
	}
	start := c.attemptStart
	if end.Before(start) {
		start = end
	}
	attrs := make([]attribute.KeyValue, 0, 8)
	attrs = append(attrs, keyAttempt.Int(n))
	if n > 1 {
		attrs = append(attrs, keyResendCount.Int(n-1))
	}
	if hasKind {
		attrs = append(attrs, kindValues[kindIndex(kind)])
	}
	var d description
	if err != nil {
		d = describe(err, c.o.omitMessage)
		attrs = d.append(attrs)
	}
	_, span := c.o.tracer.Start(c.ctx, "rebound.attempt", trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	if err != nil {
		span.SetStatus(codeError, d.status)
	}
	span.End(trace.WithTimestamp(end))
}

// end ends the call's span on e, the event that ended the call; err is the
// last error of a failed call.
func (c *call) end(e rebound.Event, err error) {
	c.ended = true
	if !c.span.IsRecording() {
		c.span.End()
		return
	}
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, keyTarget.String(e.Target), keyAttempts.Int(e.Attempt),
		keyWaited.Float64(max(e.Waited, 0).Seconds()))
	failed := e.Type == rebound.EventGiveUp
	if !failed {
		attrs = append(attrs, outcomeSuccess)
		if e.Type == rebound.EventCacheHit || e.Type == rebound.EventCacheStale {
			attrs = append(attrs, cacheValue(e))
		}
		c.span.SetAttributes(attrs...)
		c.span.End(trace.WithTimestamp(c.at(e.Elapsed)))
		return
	}
	attrs = append(attrs, outcomeFailure, reasonValues[e.Reason])
	if verdictOf(e) != 0 {
		attrs = append(attrs, kindValues[kindIndex(e.Verdict.Kind)])
	}
	status := reasonValues[e.Reason].Value.AsString()
	if err != nil {
		d := describe(err, c.o.omitMessage)
		attrs = d.append(attrs)
		status += ": " + d.status
	}
	c.span.SetAttributes(attrs...)
	c.span.SetStatus(codeError, status)
	c.span.End(trace.WithTimestamp(c.at(e.Elapsed)))
}
