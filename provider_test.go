package rebound

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestClassifyResponseProviders(t *testing.T) {
	h := func(kv ...string) http.Header {
		out := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   string
		kind   Kind
		wait   time.Duration // -1: no hint
	}{
		// OpenAI
		{"openai rate limit", 429, nil, `{"error":{"message":"Rate limit reached","type":"requests","param":null,"code":"rate_limit_exceeded"}}`, KindRateLimited, -1},
		{"openai rate limit with hints", 429, h("Retry-After-Ms", "1500", "Retry-After", "2"), `{"error":{"code":"rate_limit_exceeded"}}`, KindRateLimited, 1500 * time.Millisecond},
		{"openai insufficient_quota", 429, nil, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, KindQuotaExhausted, -1},
		{"openai credit exhausted", 429, nil, `{"error":{"type":"invalid_request_error","code":"credit_balance_exhausted"}}`, KindQuotaExhausted, -1},
		{"openai org spend limit", 429, nil, `{"error":{"code":"organization_spend_limit_exceeded"}}`, KindQuotaExhausted, -1},
		{"openai project spend limit", 429, nil, `{"error":{"code":"project_spend_limit_exceeded"}}`, KindQuotaExhausted, -1},
		{"openai usage limit", 429, nil, `{"error":{"code":"organization_usage_limit_exceeded"}}`, KindQuotaExhausted, -1},
		{"openai quota with x-should-retry true", 429, h("X-Should-Retry", "true"), `{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`, KindQuotaExhausted, -1},
		{"openai context", 400, nil, `{"error":{"message":"This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`, KindContextOverflow, -1},
		{"openai server error", 500, nil, `{"error":{"message":"The server had an error","type":"server_error","param":null,"code":null}}`, KindTransient, -1},
		{"openai overloaded 503", 503, nil, `{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","code":null}}`, KindOverloaded, -1},
		{"openai bad request", 400, nil, `{"error":{"message":"Invalid value","type":"invalid_request_error","code":"invalid_value"}}`, KindPermanent, -1},
		{"openai bad request, x-should-retry true", 400, h("X-Should-Retry", "true"), `{"error":{"type":"invalid_request_error"}}`, KindPermanent, -1},
		{"openai content policy", 400, nil, `{"error":{"type":"invalid_request_error","code":"content_policy_violation"}}`, KindPermanent, -1},
		{"openai 409 lock timeout", 409, nil, `{"error":{"message":"lock timeout","type":"invalid_request_error"}}`, KindTransient, -1},
		{"openai auth", 401, nil, `{"error":{"type":"invalid_request_error","code":"invalid_api_key"}}`, KindPermanent, -1},
		// Anthropic
		{"anthropic rate limit", 429, h("Retry-After", "7"), `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's rate limit."}}`, KindRateLimited, 7 * time.Second},
		{"anthropic overloaded", 529, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, KindOverloaded, -1},
		{"anthropic overloaded as 500", 500, nil, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, KindOverloaded, -1},
		{"anthropic billing 402", 402, nil, `{"type":"error","error":{"type":"billing_error","message":"Billing issue"}}`, KindQuotaExhausted, -1},
		{"anthropic credit balance 400", 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}`, KindQuotaExhausted, -1},
		{"anthropic spend limit 429", 429, h("Retry-After", "3600"), `{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed your account's monthly spend limit.","details":{"error_code":"enforced_spend_limit_reached"}}}`, KindQuotaExhausted, time.Hour},
		{"anthropic prompt too long", 400, nil, `{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}`, KindContextOverflow, -1},
		{"anthropic request too large", 413, nil, `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`, KindContextOverflow, -1},
		{"anthropic api error", 500, nil, `{"type":"error","error":{"type":"api_error","message":"Internal server error","details":null}}`, KindTransient, -1},
		{"anthropic not found", 404, nil, `{"type":"error","error":{"type":"not_found_error","message":"model: nope"}}`, KindPermanent, -1},
		// Gemini
		{"gemini rate limit with retry delay", 429, nil, `{"error":{"code":429,"message":"Resource has been exhausted","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"53s"}]}}`, KindRateLimited, 53 * time.Second},
		{"gemini fractional retry delay", 429, nil, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.5s"}]}}`, KindRateLimited, 1500 * time.Millisecond},
		{"gemini header beats retry delay", 429, h("Retry-After", "2"), `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"53s"}]}}`, KindRateLimited, 2 * time.Second},
		{"gemini daily quota", 429, nil, `{"error":{"code":429,"message":"You exceeded your current quota","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier"}]}]}}`, KindQuotaExhausted, -1},
		{"gemini context", 400, nil, `{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}`, KindContextOverflow, -1},
		{"gemini overloaded", 503, nil, `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`, KindOverloaded, -1},
		{"gemini unavailable", 503, nil, `{"error":{"code":503,"message":"The service is currently unavailable.","status":"UNAVAILABLE"}}`, KindTransient, -1},
		{"gemini invalid argument", 400, nil, `{"error":{"code":400,"message":"bad","status":"INVALID_ARGUMENT"}}`, KindPermanent, -1},
		{"gemini bad retry delay", 429, nil, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"soon"}]}}`, KindRateLimited, -1},
		{"gemini absurd retry delay", 429, nil, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1e300s"}]}}`, KindRateLimited, -1},
		// Other shapes
		{"body retry_after", 503, nil, `{"error":"busy","retry_after":3}`, KindTransient, 3 * time.Second},
		{"body retry_after string", 429, nil, `{"retry_after":"0.25"}`, KindRateLimited, 250 * time.Millisecond},
		{"body retry_after negative", 429, nil, `{"retry_after":-4}`, KindRateLimited, -1},
		{"not json", 503, nil, `<html>bad gateway</html>`, KindTransient, -1},
		{"truncated json", 429, nil, `{"error":{"code":"insufficient_quo`, KindRateLimited, -1},
		{"x-should-retry false beats everything", 503, h("X-Should-Retry", "false", "Retry-After", "1"), `{"error":{"code":"rate_limit_exceeded"}}`, KindPermanent, -1},
		{"x-should-retry true on a 400 without body", 400, h("X-Should-Retry", "true"), ``, KindTransient, -1},
		{"402 without body", 402, nil, ``, KindQuotaExhausted, -1},
		{"x-should-retry true keeps a 409 transient", 409, h("X-Should-Retry", "true"), `{"error":{"type":"invalid_request_error","message":"lock timeout"}}`, KindTransient, -1},
		{"x-should-retry true keeps a 503 transient", 503, h("X-Should-Retry", "true"), `{"error":{"type":"invalid_request_error"}}`, KindTransient, -1},
		{"x-should-retry true keeps a 429 rate-limited", 429, h("X-Should-Retry", "true"), `{"type":"error","error":{"type":"permission_error"}}`, KindRateLimited, -1},
	} {
		hdr := tc.header
		if hdr == nil {
			hdr = http.Header{}
		}
		v := ClassifyResponse(tc.status, hdr, []byte(tc.body))
		wantHint := tc.wait >= 0
		if v.Kind != tc.kind || v.HasServerWait != wantHint || (wantHint && v.ServerWait != tc.wait) {
			t.Errorf("%s: %+v, want kind %v hint %v", tc.name, v, tc.kind, tc.wait)
		}
	}
}

func TestRateLimitResetIsNotAWaitHint(t *testing.T) {
	h := http.Header{}
	h.Set("X-Ratelimit-Reset-Requests", "6m0s")
	h.Set("Anthropic-Ratelimit-Requests-Reset", "2030-01-01T00:00:00Z")
	if v := ClassifyResponse(429, h, nil); v.HasServerWait {
		t.Fatalf("a reset header became a wait hint: %+v", v)
	}
}

func TestErrorCode(t *testing.T) {
	for _, tc := range []struct {
		err       error
		typ, code string
	}{
		{&HTTPError{StatusCode: 400, Body: []byte(`{"error":{"type":"invalid_request_error","code":"context_length_exceeded"}}`)}, "invalid_request_error", "context_length_exceeded"},
		{fmt.Errorf("call: %w", &HTTPError{StatusCode: 429, Body: []byte(`{"type":"error","error":{"type":"rate_limit_error","details":{"error_code":"enforced_spend_limit_reached"}}}`)}), "rate_limit_error", "enforced_spend_limit_reached"},
		{&HTTPError{StatusCode: 429, Body: []byte(`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED"}}`)}, "RESOURCE_EXHAUSTED", ""},
		{&StreamError{Event: "error", Data: []byte(`{"type":"error","error":{"type":"overloaded_error"}}`)}, "overloaded_error", ""},
		{&HTTPError{StatusCode: 502, Body: []byte(`<html>`)}, "", ""},
		{errors.New("plain"), "", ""},
	} {
		if typ, code := ErrorCode(tc.err); typ != tc.typ || code != tc.code {
			t.Errorf("%v: (%q, %q), want (%q, %q)", tc.err, typ, code, tc.typ, tc.code)
		}
	}
}

// ErrorCode reaches the provider's error through the *GiveUpError that Do
// returns, which wraps several errors.
func TestErrorCodeThroughDo(t *testing.T) {
	quota := &HTTPError{StatusCode: 429, Body: []byte(`{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := Run(ctx, Policy{}, func(context.Context) error { return quota })
	var gu *GiveUpError
	if !errors.As(err, &gu) || gu.Verdict.Kind != KindQuotaExhausted {
		t.Fatalf("%v", err)
	}
	if typ, code := ErrorCode(err); typ != "insufficient_quota" || code != "insufficient_quota" {
		t.Errorf("ErrorCode of Do's error: (%q, %q)", typ, code)
	}
	// And through a give-up that also wraps the caller's cancellation.
	cancel()
	err = Run(ctx, Policy{}, func(context.Context) error { return quota })
	if typ, _ := ErrorCode(err); typ != "insufficient_quota" {
		t.Errorf("after cancellation: %q from %v", typ, err)
	}
}
