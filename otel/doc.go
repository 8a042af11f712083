// Package reboundotel turns rebound's events into OpenTelemetry metrics and
// traces.
//
// The package lives at github.com/rebound-go/rebound/otel, a module of its
// own so that rebound itself keeps to the standard library, and is named
// reboundotel so that it can be imported beside go.opentelemetry.io/otel,
// whose package is called otel, without renaming either.
//
// # Wiring
//
// New returns an *Observer; put it in a Policy and every call made under that
// policy, through rebound.Do, rebound.Transport or rebound.Stream, is
// measured and traced:
//
//	obs := reboundotel.New(reboundotel.Config{}) // the global providers
//	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{Observer: obs}}}
//
// The Observer asks nothing of the code that makes calls: a call made with a
// policy that has no observer pays nothing for this package. The providers
// are read once, by New: a nil Config.MeterProvider or Config.TracerProvider
// means the global one (otel.GetMeterProvider, otel.GetTracerProvider),
// which forwards to whatever provider is installed later.
//
// # Traces
//
// The Observer is a rebound.CallObserver: before each call's first attempt,
// rebound hands it the call's context, and it starts a "rebound.call" span
// (kind client) there, a child of whatever span the caller has open. The
// call span ends on the event that ends the call: the successful attempt,
// or the give-up, which sets its status to Error. It carries
//
//	rebound.target            what was called (rebound.WithTarget, or the host under Transport)
//	rebound.attempts          how many attempts were made
//	rebound.outcome           "success" or "failure"
//	rebound.waited.duration   seconds spent waiting between attempts
//	rebound.stop_reason       why a failed call stopped ("attempts_exhausted", "not_retryable", ...)
//	rebound.verdict.kind      the kind of the last failure ("transient", "rate_limited", ...)
//	error.type                the last failure's HTTP status code, or else its Go type
//	http.response.status_code the last failed response's status
//	rebound.error.type        the provider's error type (see rebound.ErrorCode)
//	rebound.error.code        the provider's error code
//
// Each attempt is a child span "rebound.attempt", timed from the attempt's
// start (the call's start, or the end of the wait before it) to its end,
// with rebound.attempt (its number, from 1), http.request.resend_count (for
// an attempt after the first), and for a failed attempt its verdict kind,
// status code and error type, and status Error. rebound reports an attempt
// when it has ended, so the attempt span is made after the fact with those
// timestamps: spans that the attempt itself opened (an instrumented HTTP
// client under Transport.Base, say) are children of the call span, not of
// the attempt span. Each scheduled retry adds a "rebound.wait" event to the
// call span, with rebound.wait.duration in seconds, the attempt it follows,
// the failure's kind and, when the server asked for a wait,
// rebound.server_wait.duration; each hedge (rebound.Hedge) a
// "rebound.hedge" event with the attempt it was started beside.
//
// A call that a rebound.Transport's Cache answered without an attempt (a
// hit) ends its span with it, successful, with rebound.cache "hit" and no
// attempt span; a stale answer, served once the call has given up, is
// counted in rebound.cache.served, and the call's span shows the failure
// it stands in for.
//
// Times come from the call's rebound.Clock, so a simulation's virtual time
// gives consistent spans too.
//
// # Metrics
//
// Names follow OpenTelemetry's conventions: dotted, durations in seconds
// with unit "s", counts with a curly-brace unit. OpenTelemetry defines no
// retry instruments, so every name is under "rebound."; where a convention
// has an attribute for the same thing (error.type,
// http.response.status_code, http.request.resend_count) it is used. The HTTP
// client convention's http.client.request.duration and the GenAI
// convention's gen_ai.client.operation.duration measure one request each:
// an instrumented client under Transport.Base records them per attempt,
// while rebound.call.duration covers a whole call, waits included, and uses
// the GenAI convention's bucket boundaries.
//
//	rebound.attempts                counter   {attempt}  rebound.target, rebound.outcome, rebound.verdict.kind (failures)
//	rebound.retries                 counter   {retry}    rebound.target, rebound.verdict.kind
//	rebound.give_ups                counter   {call}     rebound.target, rebound.stop_reason, rebound.verdict.kind
//	rebound.hedges                  counter   {hedge}    rebound.target
//	rebound.restarts                counter   {restart}  rebound.target (the server's, "mcp:NAME")
//	rebound.wait.duration           histogram s          rebound.target, rebound.verdict.kind
//	rebound.call.duration           histogram s          rebound.target, rebound.outcome
//	rebound.retry_budget.available  gauge     {retry}    rebound.target
//	rebound.breaker.state           gauge     {state}    rebound.breaker.name (0 closed, 1 half-open, 2 open)
//	rebound.breaker.changes         counter   {change}   rebound.breaker.name, rebound.breaker.state (the new state)
//	rebound.limiter.delay           histogram s          rebound.target
//	rebound.cost.usd                counter   {USD}      rebound.target
//	rebound.cost.wasted.usd         counter   {USD}      rebound.target
//	rebound.tokens                  counter   {token}    rebound.target, gen_ai.token.type
//	rebound.cache.served            counter   {answer}   rebound.target, rebound.cache ("hit" or "stale")
//
// Through OpenTelemetry's Prometheus exporter they read as
// rebound_attempts_total, rebound_call_duration_seconds_bucket,
// rebound_breaker_state and so on; the program in example/prometheus serves
// them.
//
// The retry budget gauge holds the last value an event reported for the
// target (rebound.Event.BudgetLeft, on retries and give-ups, when the
// policy's budget can say). The breaker instruments are fed by
// Observer.BreakerStateChange, which fits breaker.Config.OnStateChange, or
// by a rebound.EventBreaker given to Observe (breaker.Notify makes them;
// reboundmcp reports its respawn breaker so, named by the Target), and so
// report a breaker from its first change on. rebound.restarts counts the
// rebound.EventRestart events of a supervised server (reboundmcp's). Both
// kinds of event belong to no call: they are counted, and make no span,
// since the call that a crash cut short learns of it as its attempt's
// error. The limiter, cost and token
// instruments are fed by hand: RecordLimiterDelay, RecordCost,
// RecordUsage and RecordTask, since rebound's events carry no usage
// (rebound proxy calls RecordUsage with the tokens of each answer, under
// the target of the attempt that gave it).
//
// rebound.tokens counts the tokens providers reported by
// gen_ai.token.type, the GenAI conventions' attribute: "input" and
// "output" are its values, input counting every input token, those read
// from the provider's prompt cache or written into it included, as its
// gen_ai.usage.input_tokens does; "cache_read" and "cache_write" are
// rebound's own values, which the conventions do not define, for the
// parts of the input read from the cache and written into it (their
// usage attributes call them gen_ai.usage.cache_read.input_tokens and
// gen_ai.usage.cache_creation.input_tokens). The cache types are parts of
// input, not added to it: the share of input read from the cache is
// cache_read over input. It is a counter rather than the conventions'
// gen_ai.client.token.usage histogram, which an instrumented client under
// Transport.Base records per request, with attributes rebound does not
// know.
//
// # What is never recorded
//
// No request header, API key, URL, prompt or response body is recorded: only
// the fields listed above. An error message appears only as a span's status
// description, at most 200 characters, and only when the error is one of
// rebound's own (an *rebound.HTTPError, *rebound.StreamError, the scrubbed
// transport errors of rebound.Transport, a *rebound.PolicyError, a
// *breaker.OpenError), whose messages rebound.Transport has cleaned of the
// request's credentials; for any other error only its Go type is recorded.
// rebound.Transport scrubs what a server echoes back; an *rebound.HTTPError
// that a function given to rebound.Do makes itself is recorded as it is,
// so set Config.OmitErrorMessages if such bodies may hold secrets.
//
// # Without ObserveCall
//
// Observe, called on the Observer itself rather than on the per-call
// observer ObserveCall returns (an observer that wraps it in a
// rebound.ObserverFunc does that), records the metrics but no spans, and
// takes a failed attempt's verdict kind from rebound.Classify, since the
// policy's own verdict arrives only with the event after it.
package reboundotel
