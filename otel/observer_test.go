package reboundotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cost"
	reboundotel "github.com/rebound-go/rebound/otel"
)

var _ rebound.CallObserver = (*reboundotel.Observer)(nil)

const target = "gpt-x:summarise"

var (
	targetAttr = attribute.String("rebound.target", target)
	success    = attribute.String("rebound.outcome", "success")
	failure    = attribute.String("rebound.outcome", "failure")
)

func kind(k string) attribute.KeyValue { return attribute.String("rebound.verdict.kind", k) }

func reason(r string) attribute.KeyValue { return attribute.String("rebound.stop_reason", r) }

// step is one attempt of a scripted call: how long it takes (in a
// testing/synctest bubble's time) and what it returns.
type step struct {
	took time.Duration
	err  error
}

// scripted returns a function for Do that plays steps, one per attempt,
// each taking its duration.
func scripted(steps ...step) func(context.Context) (string, error) {
	n := 0
	return func(context.Context) (string, error) {
		s := steps[min(n, len(steps)-1)]
		n++
		time.Sleep(s.took)
		if s.err != nil {
			return "", s.err
		}
		return "ok", nil
	}
}

func openAIError(status int, typ, code string, h http.Header) *rebound.HTTPError {
	return &rebound.HTTPError{StatusCode: status, Header: h,
		Body: fmt.Appendf(nil, `{"error":{"message":"m","type":%q,"code":%q}}`, typ, code)}
}

func TestCallSpans(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		t0 := time.Now()
		ctx, parent := h.tp.Tracer("caller").Start(context.Background(), "agent.step")
		ctx = rebound.WithTarget(ctx, target)

		p := rebound.Policy{BaseDelay: 100 * time.Millisecond, Jitter: rebound.JitterNone, Observer: h.obs}
		_, err := rebound.Do(ctx, p, scripted(
			step{50 * time.Millisecond, openAIError(503, "server_error", "engine_busy", nil)},
			step{20 * time.Millisecond, openAIError(429, "requests", "rate_limit_exceeded", http.Header{"Retry-After-Ms": {"250"}})},
			step{10 * time.Millisecond, nil},
		))
		if err != nil {
			t.Fatal(err)
		}
		parent.End()

		spans := h.spans.GetSpans()
		if len(spans) != 5 {
			t.Fatalf("%d spans: %v", len(spans), spans)
		}
		callSpan := spans[3]
		if callSpan.Name != "rebound.call" || callSpan.SpanKind != trace.SpanKindClient {
			t.Fatalf("call span %q kind %v", callSpan.Name, callSpan.SpanKind)
		}
		if callSpan.Parent.SpanID() != parent.SpanContext().SpanID() || callSpan.SpanContext.TraceID() != parent.SpanContext().TraceID() {
			t.Error("the call span is not a child of the caller's span")
		}
		if !callSpan.StartTime.Equal(t0) || !callSpan.EndTime.Equal(t0.Add(430*time.Millisecond)) {
			t.Errorf("call span from %v to %v", callSpan.StartTime.Sub(t0), callSpan.EndTime.Sub(t0))
		}
		if callSpan.Status.Code == codes.Error {
			t.Errorf("status %v", callSpan.Status)
		}
		for k, want := range map[string]any{
			"rebound.target": target, "rebound.attempts": int64(3), "rebound.outcome": "success",
			"rebound.waited.duration": 0.35,
		} {
			if v, ok := attr(callSpan.Attributes, k); !ok || v.AsInterface() != want {
				t.Errorf("call span %s = %v, want %v", k, v.AsInterface(), want)
			}
		}

		// Each attempt from its start (the call's, or the end of the wait
		// before it) to its end.
		wantAttempts := []struct {
			from, to time.Duration
			kind     string
			status   int64
			errCode  string
		}{
			{0, 50 * time.Millisecond, "transient", 503, "engine_busy"},
			{150 * time.Millisecond, 170 * time.Millisecond, "rate_limited", 429, "rate_limit_exceeded"},
			{420 * time.Millisecond, 430 * time.Millisecond, "", 0, ""},
		}
		for i, want := range wantAttempts {
			s := spans[i]
			if s.Name != "rebound.attempt" || s.Parent.SpanID() != callSpan.SpanContext.SpanID() {
				t.Fatalf("span %d: %q, parent %v", i, s.Name, s.Parent.SpanID())
			}
			if got := s.StartTime.Sub(t0); got != want.from {
				t.Errorf("attempt %d starts at %v, want %v", i+1, got, want.from)
			}
			if got := s.EndTime.Sub(t0); got != want.to {
				t.Errorf("attempt %d ends at %v, want %v", i+1, got, want.to)
			}
			if v, _ := attr(s.Attributes, "rebound.attempt"); v.AsInt64() != int64(i+1) {
				t.Errorf("attempt %d numbered %v", i+1, v.AsInt64())
			}
			if v, ok := attr(s.Attributes, "http.request.resend_count"); ok != (i > 0) || (ok && v.AsInt64() != int64(i)) {
				t.Errorf("attempt %d: resend count %v (%v)", i+1, v.AsInt64(), ok)
			}
			v, _ := attr(s.Attributes, "rebound.verdict.kind")
			if v.AsString() != want.kind {
				t.Errorf("attempt %d kind %q, want %q", i+1, v.AsString(), want.kind)
			}
			v, _ = attr(s.Attributes, "http.response.status_code")
			if v.AsInt64() != want.status {
				t.Errorf("attempt %d status %v, want %v", i+1, v.AsInt64(), want.status)
			}
			v, _ = attr(s.Attributes, "rebound.error.code")
			if v.AsString() != want.errCode {
				t.Errorf("attempt %d error code %q, want %q", i+1, v.AsString(), want.errCode)
			}
			if failed := want.kind != ""; failed != (s.Status.Code == codes.Error) {
				t.Errorf("attempt %d status %v", i+1, s.Status)
			} else if failed && !strings.HasPrefix(s.Status.Description, fmt.Sprintf("http %d", want.status)) {
				t.Errorf("attempt %d status description %q", i+1, s.Status.Description)
			}
			if v, _ := attr(s.Attributes, "error.type"); want.status != 0 && v.AsString() != fmt.Sprint(want.status) {
				t.Errorf("attempt %d error.type %q", i+1, v.AsString())
			}
		}

		// A wait event per retry, at the retry.
		if len(callSpan.Events) != 2 {
			t.Fatalf("events %v", callSpan.Events)
		}
		for i, want := range []struct {
			at, wait   time.Duration
			serverWait float64
		}{{50 * time.Millisecond, 100 * time.Millisecond, -1}, {170 * time.Millisecond, 250 * time.Millisecond, 0.25}} {
			e := callSpan.Events[i]
			if e.Name != "rebound.wait" || e.Time.Sub(t0) != want.at {
				t.Errorf("event %d: %q at %v", i, e.Name, e.Time.Sub(t0))
			}
			if v, _ := attr(e.Attributes, "rebound.wait.duration"); v.AsFloat64() != want.wait.Seconds() {
				t.Errorf("event %d waits %v", i, v.AsFloat64())
			}
			if v, ok := attr(e.Attributes, "rebound.server_wait.duration"); ok != (want.serverWait >= 0) || (ok && v.AsFloat64() != want.serverWait) {
				t.Errorf("event %d server wait %v (%v)", i, v.AsFloat64(), ok)
			}
		}

		ms := h.metrics(t)
		for _, c := range []struct {
			name  string
			attrs []attribute.KeyValue
			want  float64
		}{
			{"rebound.attempts", []attribute.KeyValue{targetAttr, success}, 1},
			{"rebound.attempts", []attribute.KeyValue{targetAttr, failure, kind("transient")}, 1},
			{"rebound.attempts", []attribute.KeyValue{targetAttr, failure, kind("rate_limited")}, 1},
			{"rebound.retries", []attribute.KeyValue{targetAttr, kind("transient")}, 1},
			{"rebound.retries", []attribute.KeyValue{targetAttr, kind("rate_limited")}, 1},
			{"rebound.wait.duration", []attribute.KeyValue{targetAttr, kind("transient")}, 0.1},
			{"rebound.wait.duration", []attribute.KeyValue{targetAttr, kind("rate_limited")}, 0.25},
			{"rebound.call.duration", []attribute.KeyValue{targetAttr, success}, 0.43},
		} {
			if got := mustValue(t, ms, c.name, c.attrs...).value; math.Abs(got-c.want) > 1e-9 {
				t.Errorf("%s%v = %v, want %v", c.name, c.attrs, got, c.want)
			}
		}
		if _, ok := ms["rebound.give_ups"]; ok {
			t.Error("a successful call counted as a give-up")
		}
	})
}

func TestGiveUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		ctx := rebound.WithTarget(context.Background(), target)
		p := rebound.Policy{Observer: h.obs}
		_, err := rebound.Do(ctx, p, scripted(
			step{time.Second, openAIError(400, "invalid_request_error", "context_length_exceeded", nil)}))
		if err == nil {
			t.Fatal("no error")
		}
		spans := h.spans.GetSpans()
		if len(spans) != 2 {
			t.Fatalf("%d spans", len(spans))
		}
		c := spans[1]
		if c.Status.Code != codes.Error || !strings.HasPrefix(c.Status.Description, "not_retryable: http 400 Bad Request") {
			t.Errorf("status %v", c.Status)
		}
		for k, want := range map[string]any{
			"rebound.outcome": "failure", "rebound.stop_reason": "not_retryable", "rebound.verdict.kind": "context_overflow",
			"rebound.attempts": int64(1), "error.type": "400", "http.response.status_code": int64(400),
			"rebound.error.type": "invalid_request_error", "rebound.error.code": "context_length_exceeded",
		} {
			if v, ok := attr(c.Attributes, k); !ok || v.AsInterface() != want {
				t.Errorf("call span %s = %v, want %v", k, v.AsInterface(), want)
			}
		}
		ms := h.metrics(t)
		if v := mustValue(t, ms, "rebound.give_ups", targetAttr, reason("not_retryable"), kind("context_overflow")).value; v != 1 {
			t.Errorf("give-ups %v", v)
		}
		if v := mustValue(t, ms, "rebound.attempts", targetAttr, failure, kind("context_overflow")).value; v != 1 {
			t.Errorf("attempts %v", v)
		}
		if p := mustValue(t, ms, "rebound.call.duration", targetAttr, failure); p.count != 1 || p.value != 1 {
			t.Errorf("call duration %+v", p)
		}
	})
}

func TestRetryBudgetGauge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		ctx := rebound.WithTarget(context.Background(), target)
		budget := &rebound.RetryBudget{}
		p := rebound.Policy{BaseDelay: rebound.NoDelay, Budget: budget, Observer: h.obs}
		for range 3 {
			_, _ = rebound.Do(ctx, p, scripted(step{0, errors.New("flaky")}, step{0, nil}))
		}
		want := budget.Available(time.Now())
		if got := mustValue(t, h.metrics(t), "rebound.retry_budget.available", targetAttr).value; got != want || want <= 0 {
			t.Errorf("budget gauge %v, want %v", got, want)
		}
	})
}

// An observer wrapped in an ObserverFunc never sees ObserveCall: it still
// counts, with the default classifier's verdicts, and makes no spans.
func TestObserveWithoutCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		ctx := rebound.WithTarget(context.Background(), target)
		p := rebound.Policy{BaseDelay: time.Second, Jitter: rebound.JitterNone, Observer: rebound.ObserverFunc(h.obs.Observe)}
		_, err := rebound.Do(ctx, p, scripted(step{0, openAIError(503, "", "", nil)}))
		if err == nil {
			t.Fatal("no error")
		}
		if n := len(h.spans.GetSpans()); n != 0 {
			t.Errorf("%d spans", n)
		}
		ms := h.metrics(t)
		for _, c := range []struct {
			name  string
			attrs []attribute.KeyValue
			want  float64
		}{
			{"rebound.attempts", []attribute.KeyValue{targetAttr, failure, kind("transient")}, 3},
			{"rebound.retries", []attribute.KeyValue{targetAttr, kind("transient")}, 2},
			{"rebound.give_ups", []attribute.KeyValue{targetAttr, reason("attempts_exhausted"), kind("transient")}, 1},
			{"rebound.wait.duration", []attribute.KeyValue{targetAttr, kind("transient")}, 3},
			{"rebound.call.duration", []attribute.KeyValue{targetAttr, failure}, 3},
		} {
			if got := mustValue(t, ms, c.name, c.attrs...).value; got != c.want {
				t.Errorf("%s = %v, want %v", c.name, got, c.want)
			}
		}
	})
}

func TestBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		b := breaker.New("gpt-x", breaker.Config{ConsecutiveFailures: 2, OnStateChange: h.obs.BreakerStateChange})
		ctx := rebound.WithTarget(context.Background(), target)
		p := rebound.Policy{BaseDelay: rebound.NoDelay, Breaker: b, Observer: h.obs}
		down := scripted(step{0, openAIError(503, "", "", nil)})
		if _, err := rebound.Do(ctx, p, down); err == nil {
			t.Fatal("no error")
		}
		if b.State() != breaker.Open {
			t.Fatalf("breaker %v", b.State())
		}
		// Refused before any attempt.
		if _, err := rebound.Do(ctx, p, down); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("error %v", err)
		}
		name := attribute.String("rebound.breaker.name", "gpt-x")
		ms := h.metrics(t)
		if v := mustValue(t, ms, "rebound.breaker.state", name).value; v != 2 {
			t.Errorf("state %v, want 2 (open)", v)
		}
		if v := mustValue(t, ms, "rebound.breaker.changes", name, attribute.String("rebound.breaker.state", "open")).value; v != 1 {
			t.Errorf("changes %v", v)
		}
		if v := mustValue(t, ms, "rebound.give_ups", targetAttr, reason("breaker_open")).value; v != 1 {
			t.Errorf("refused give-ups %v", v)
		}
		spans := h.spans.GetSpans()
		refused := spans[len(spans)-1]
		if refused.Name != "rebound.call" || !strings.Contains(refused.Status.Description, `breaker "gpt-x": open until`) {
			t.Errorf("refused call: %q %v", refused.Name, refused.Status)
		}
		if _, ok := attr(refused.Attributes, "rebound.verdict.kind"); ok {
			t.Error("a refused call has a verdict")
		}

		h.obs.BreakerStateChange(breaker.Change{Name: "gpt-x", From: breaker.Open, To: breaker.HalfOpen})
		if v := mustValue(t, h.metrics(t), "rebound.breaker.state", name).value; v != 1 {
			t.Errorf("state %v, want 1 (half-open)", v)
		}
	})
}

func TestRestartsAndBreakerEventsAreCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		server := attribute.String("rebound.target", "mcp:memory")
		h.obs.Observe(rebound.Event{Type: rebound.EventRestart, Target: "mcp:memory", Attempt: 2, Err: errors.New("exited")})
		h.obs.Observe(rebound.Event{Type: rebound.EventRestart, Target: "mcp:memory", Attempt: 3, Wait: time.Second})
		h.obs.Observe(rebound.Event{Type: rebound.EventBreaker, Target: "mcp:memory", State: "open", Wait: 30 * time.Second})
		b := breaker.New("gpt-x", breaker.Config{ConsecutiveFailures: 1, OnStateChange: breaker.Notify(h.obs)})
		p, _ := b.Allow()
		b.Done(p, rebound.OutcomeFailure)
		ms := h.metrics(t)
		if v := mustValue(t, ms, "rebound.restarts", server).value; v != 2 {
			t.Errorf("restarts %v, want 2", v)
		}
		for _, name := range []string{"mcp:memory", "gpt-x"} {
			attr := attribute.String("rebound.breaker.name", name)
			if v := mustValue(t, ms, "rebound.breaker.state", attr).value; v != 2 {
				t.Errorf("%s: state %v, want 2 (open)", name, v)
			}
			if v := mustValue(t, ms, "rebound.breaker.changes", attr, attribute.String("rebound.breaker.state", "open")).value; v != 1 {
				t.Errorf("%s: changes %v, want 1", name, v)
			}
		}
		if _, ok := value(ms, "rebound.attempts", server); ok {
			t.Error("a restart counted as an attempt")
		}
		if n := len(h.spans.GetSpans()); n != 0 {
			t.Errorf("%d spans for events outside any call", n)
		}
	})
}

func TestErrorMessages(t *testing.T) {
	const secret = "sk-do-not-record"
	long := &rebound.HTTPError{StatusCode: 500, Body: []byte(strings.Repeat("é", 400))}
	for _, c := range []struct {
		name string
		err  error
		omit bool
		want string // the attempt span's status description
	}{
		{"foreign", fmt.Errorf("prompt %q failed", secret), false, "*errors.errorString"},
		{"permanent foreign", rebound.Permanent(errors.New(secret)), false, "*errors.errorString"},
		{"permanent own", rebound.Permanent(&rebound.HTTPError{StatusCode: 401}), false, "http 401 Unauthorized"},
		{"wrapped own", fmt.Errorf("%s: %w", secret, &rebound.HTTPError{StatusCode: 401}), false, "*fmt.wrapError"},
		{"long", long, false, ""},
		{"omitted", &rebound.HTTPError{StatusCode: 401}, true, "*rebound.HTTPError"},
	} {
		t.Run(c.name, func(t *testing.T) {
			reader, spans := sdkmetric.NewManualReader(), tracetest.NewInMemoryExporter()
			obs := reboundotel.New(reboundotel.Config{
				MeterProvider:     sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
				TracerProvider:    sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)),
				OmitErrorMessages: c.omit,
			})
			p := rebound.Policy{MaxAttempts: 1, Observer: obs}
			_, _ = rebound.Do(context.Background(), p, func(context.Context) (int, error) { return 0, c.err })
			got := spans.GetSpans()
			if len(got) != 2 {
				t.Fatalf("%d spans", len(got))
			}
			desc := got[0].Status.Description
			if c.want != "" && desc != c.want {
				t.Errorf("description %q, want %q", desc, c.want)
			}
			if n := len([]rune(desc)); n > 200 || strings.Contains(desc, secret) {
				t.Errorf("description of %d characters: %q", n, desc)
			}
			if c.name == "long" && !strings.HasSuffix(desc, "…") {
				t.Errorf("long description not cut: %q", desc)
			}
			if d := got[1].Status.Description; strings.Contains(d, secret) || len([]rune(d)) > 250 {
				t.Errorf("call status %q", d)
			}
		})
	}
}

func TestCostAndLimiter(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.obs.RecordCost(ctx, "gpt-x", 0.5)
	h.obs.RecordCost(ctx, "gpt-x", -1) // ignored
	h.obs.RecordCost(ctx, "gpt-x", math.NaN())
	prices := cost.Table{"gpt-x": {InputPerMillion: 2, OutputPerMillion: 10}}
	h.obs.RecordTask(ctx, prices, cost.Task{Succeeded: true, Attempts: []cost.Attempt{
		{Target: "gpt-x", Usage: cost.Usage{InputTokens: 1e6}},
		{Target: "gpt-x", Usage: cost.Usage{InputTokens: 1e6, OutputTokens: 1e5}, Answered: true},
		{Target: "unpriced", Usage: cost.Usage{InputTokens: 1e6}},
	}})
	h.obs.RecordLimiterDelay(ctx, "gpt-x", 1500*time.Millisecond)
	ms := h.metrics(t)
	x := attribute.String("rebound.target", "gpt-x")
	if v := mustValue(t, ms, "rebound.cost.usd", x).value; math.Abs(v-(0.5+2+3)) > 1e-9 {
		t.Errorf("cost %v", v)
	}
	if v := mustValue(t, ms, "rebound.cost.wasted.usd", x).value; v != 2 {
		t.Errorf("wasted %v", v)
	}
	if p := mustValue(t, ms, "rebound.limiter.delay", x); p.value != 1.5 || p.count != 1 {
		t.Errorf("limiter delay %+v", p)
	}
}

// TestTokensByType: RecordUsage and RecordTask count tokens by target
// and gen_ai.token.type: input (every input token, cached included, as the
// GenAI conventions' gen_ai.usage.input_tokens), output, and of the input
// cache_read and cache_write (five-minute and one-hour writes together);
// a type with no tokens adds nothing, nor does a negative count.
func TestTokensByType(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.obs.RecordUsage(ctx, "claude", cost.Usage{InputTokens: 10, CacheReadTokens: 90000, CacheWriteTokens: 1500, CacheWrite1hTokens: 500, OutputTokens: 200})
	h.obs.RecordUsage(ctx, "claude", cost.Usage{InputTokens: 5, OutputTokens: 7})
	h.obs.RecordUsage(ctx, "claude", cost.Usage{InputTokens: -3, CacheReadTokens: -3, OutputTokens: -3})
	h.obs.RecordTask(ctx, cost.Table{}, cost.Task{Succeeded: true, Attempts: []cost.Attempt{
		{Target: "gpt", Usage: cost.Usage{InputTokens: 2010, CacheReadTokens: 90000, OutputTokens: 100}, Answered: true},
	}})
	ms := h.metrics(t)
	for _, c := range []struct {
		target, typ string
		want        float64
	}{
		{"claude", "input", 10 + 90000 + 2000 + 5}, {"claude", "output", 207}, {"claude", "cache_read", 90000}, {"claude", "cache_write", 2000},
		{"gpt", "input", 92010}, {"gpt", "output", 100}, {"gpt", "cache_read", 90000},
	} {
		p := mustValue(t, ms, "rebound.tokens", attribute.String("rebound.target", c.target), attribute.String("gen_ai.token.type", c.typ))
		if p.value != c.want {
			t.Errorf("%s %s tokens: %v, want %v", c.target, c.typ, p.value, c.want)
		}
	}
	if p, ok := value(ms, "rebound.tokens", attribute.String("rebound.target", "gpt"), attribute.String("gen_ai.token.type", "cache_write")); ok {
		t.Errorf("gpt wrote nothing into the cache, and has a series of cache writes: %+v", p)
	}
	if m := ms["rebound.tokens"]; m.Unit != "{token}" {
		t.Errorf("unit %q", m.Unit)
	}
}

// Unsampled calls make no spans and are still counted.
func TestUnsampled(t *testing.T) {
	reader, spans := sdkmetric.NewManualReader(), tracetest.NewInMemoryExporter()
	obs := reboundotel.New(reboundotel.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithSampler(sdktrace.NeverSample())),
	})
	p := rebound.Policy{BaseDelay: rebound.NoDelay, Observer: obs}
	_, _ = rebound.Do(context.Background(), p, scripted(step{0, errors.New("x")}, step{0, nil}))
	if n := len(spans.GetSpans()); n != 0 {
		t.Errorf("%d spans", n)
	}
	h := &harness{reader: reader}
	if v := mustValue(t, h.metrics(t), "rebound.attempts", attribute.String("rebound.target", ""), success).value; v != 1 {
		t.Errorf("attempts %v", v)
	}
}

// A nil provider means the global one, even one installed after New.
func TestGlobalProviders(t *testing.T) {
	obs := reboundotel.New(reboundotel.Config{})
	reader, spans := sdkmetric.NewManualReader(), tracetest.NewInMemoryExporter()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	_, _ = rebound.Do(context.Background(), rebound.Policy{Observer: obs}, func(context.Context) (int, error) { return 1, nil })
	if n := len(spans.GetSpans()); n != 2 {
		t.Errorf("%d spans", n)
	}
	h := &harness{reader: reader}
	mustValue(t, h.metrics(t), "rebound.attempts", attribute.String("rebound.target", ""), success)
}

func TestConcurrentCalls(t *testing.T) {
	h := newHarness(t)
	p := rebound.Policy{BaseDelay: rebound.NoDelay, Observer: h.obs}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			ctx := rebound.WithTarget(context.Background(), fmt.Sprint("t", i%4))
			for range 20 {
				_, _ = rebound.Do(ctx, p, scripted(step{0, errors.New("x")}, step{0, nil}))
			}
		})
	}
	wg.Wait()
	ms := h.metrics(t)
	total := 0.0
	for _, p := range points(ms["rebound.attempts"]) {
		total += p.value
	}
	if total != 16*20*2 {
		t.Errorf("%v attempts", total)
	}
	if n := len(h.spans.GetSpans()); n != 16*20*3 {
		t.Errorf("%d spans", n)
	}
}

// Under Transport a call with no target of its own is named by its host.
func TestTransportTarget(t *testing.T) {
	h := newHarness(t)
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n++; n == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: h.obs}}}
	resp, err := client.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	spans := h.spans.GetSpans()
	if len(spans) != 3 || spans[2].Name != "rebound.call" || len(spans[2].Events) != 1 {
		t.Fatalf("spans %v", spans)
	}
	host := strings.TrimPrefix(srv.URL, "http://")
	if v, _ := attr(spans[2].Attributes, "rebound.target"); v.AsString() != host {
		t.Errorf("target %q, want %q", v.AsString(), host)
	}
	if spans[0].EndTime.After(spans[1].StartTime) || spans[1].EndTime.After(spans[2].EndTime) {
		t.Error("attempts out of order")
	}
	ms := h.metrics(t)
	hostAttr := attribute.String("rebound.target", host)
	mustValue(t, ms, "rebound.attempts", hostAttr, failure, kind("transient"))
	mustValue(t, ms, "rebound.attempts", hostAttr, success)
	mustValue(t, ms, "rebound.retry_budget.available", hostAttr)
}

// TestHedges: a hedge is counted per target and is an event of the call
// span, at the time it started.
func TestHedges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		ctx := rebound.WithTarget(t.Context(), target)
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Observer: h.obs}
		var calls atomic.Int32
		start := time.Now()
		_, err := rebound.Do(ctx, p, func(ctx context.Context) (string, error) {
			if calls.Add(1) == 1 {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return "ok", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := mustValue(t, h.metrics(t), "rebound.hedges", targetAttr).value; got != 1 {
			t.Errorf("rebound.hedges = %v; want 1", got)
		}
		spans := h.spans.GetSpans()
		var hedges []time.Duration
		for _, s := range spans {
			for _, ev := range s.Events {
				if ev.Name == "rebound.hedge" {
					hedges = append(hedges, ev.Time.Sub(start))
				}
			}
		}
		if len(hedges) != 1 || hedges[0] != time.Second {
			t.Errorf("hedge events at %v; want one at 1s", hedges)
		}
	})
}
