package rebound

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestClassifyResponseStatus(t *testing.T) {
	want := map[int]Kind{
		400: KindPermanent, 401: KindPermanent, 403: KindPermanent, 404: KindPermanent, 422: KindPermanent,
		413: KindContextOverflow,
		408: KindTransient, 409: KindTransient, 424: KindTransient, 425: KindTransient,
		429: KindRateLimited,
		500: KindTransient, 502: KindTransient, 503: KindTransient, 504: KindTransient, 599: KindTransient,
		529: KindOverloaded, 498: KindOverloaded,
	}
	for status, kind := range want {
		if v := ClassifyResponse(status, http.Header{}, nil); v.Kind != kind || v.HasServerWait {
			t.Errorf("%d: %+v, want %v without a hint", status, v, kind)
		}
	}
}

func TestShouldRetryHeader(t *testing.T) {
	for _, tc := range []struct {
		status int
		value  string
		want   Kind
	}{
		{503, "false", KindPermanent},
		{429, "false", KindPermanent},
		{400, "true", KindTransient},
		{429, "true", KindRateLimited},
		{503, "TRUE", KindTransient},
		{400, "maybe", KindPermanent},
	} {
		h := http.Header{"X-Should-Retry": {tc.value}}
		if v := ClassifyResponse(tc.status, h, nil); v.Kind != tc.want {
			t.Errorf("%d with x-should-retry %q: %v, want %v", tc.status, tc.value, v.Kind, tc.want)
		}
	}
}

type opaqueError struct{}

func (opaqueError) Error() string { return "something odd" }

func TestClassify(t *testing.T) {
	reset := &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
	refused := &url.Error{Op: "Post", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}}
	for _, tc := range []struct {
		name string
		err  error
		want Kind
	}{
		{"unknown", errors.New("boom"), KindTransient},
		{"opaque type", opaqueError{}, KindTransient},
		{"permanent mark", Permanent(errors.New("bad")), KindPermanent},
		{"wrapped permanent", fmt.Errorf("tool: %w", Permanent(io.EOF)), KindPermanent},
		{"retryable mark over 400", Retryable(&HTTPError{StatusCode: 400}), KindTransient},
		{"http 503", &HTTPError{StatusCode: 503}, KindTransient},
		{"wrapped http 401", fmt.Errorf("call: %w", &HTTPError{StatusCode: 401}), KindPermanent},
		{"joined", errors.Join(errors.New("x"), &HTTPError{StatusCode: 429}), KindRateLimited},
		{"canceled", fmt.Errorf("op: %w", context.Canceled), KindCanceled},
		{"attempt timeout", context.DeadlineExceeded, KindTransient},
		{"reset", reset, KindTransient},
		{"refused", refused, KindTransient},
		{"unexpected EOF", &url.Error{Op: "Get", Err: io.ErrUnexpectedEOF}, KindTransient},
		{"dns not found", &net.DNSError{Err: "no such host", Name: "x.invalid", IsNotFound: true}, KindPermanent},
		{"dns timeout", &net.DNSError{Err: "timeout", IsTimeout: true}, KindTransient},
		{"unknown authority", &url.Error{Op: "Get", Err: x509.UnknownAuthorityError{}}, KindPermanent},
		{"bad scheme", &url.Error{Op: "Get", URL: "ftp://x", Err: errors.New(`unsupported protocol scheme "ftp"`)}, KindPermanent},
	} {
		if v := Classify(tc.err); v.Kind != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, v.Kind, tc.want)
		}
	}
}

func TestClassifyCarriesHint(t *testing.T) {
	v := Classify(&HTTPError{StatusCode: 429, Header: http.Header{"Retry-After": {"2"}}})
	if v.Kind != KindRateLimited || !v.HasServerWait || v.ServerWait != 2*time.Second {
		t.Fatalf("%+v", v)
	}
}

func TestNewHTTPErrorIsBounded(t *testing.T) {
	body := strings.Repeat("x", 3*MaxErrorBody)
	resp := &http.Response{StatusCode: 503, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
	e := NewHTTPError(resp)
	if len(e.Body) != MaxErrorBody {
		t.Fatalf("kept %d bytes, want %d", len(e.Body), MaxErrorBody)
	}
	if msg := e.Error(); len(msg) > 300 || !strings.HasPrefix(msg, "http 503 Service Unavailable: xxx") {
		t.Fatalf("message %d bytes: %.80q", len(msg), msg)
	}
}

func TestKindText(t *testing.T) {
	for k := KindTransient; k <= KindCanceled; k++ {
		b, err := k.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Kind
		if err := back.UnmarshalText(b); err != nil || back != k {
			t.Fatalf("%v: round trip gives %v, %v", k, back, err)
		}
	}
	if _, err := Kind(99).MarshalText(); err == nil {
		t.Fatal("marshalled an unknown kind")
	}
}

func TestWaitOrder(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	exhausted := http.Header{"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Reset-Tokens": {"7.66s"},
		"X-Ratelimit-Remaining-Requests": {"10"}, "X-Ratelimit-Reset-Requests": {"6m0s"}}
	withRetryAfter := exhausted.Clone()
	withRetryAfter.Set("Retry-After", "3")
	for _, tc := range []struct {
		name   string
		status int
		h      http.Header
		body   string
		want   time.Duration
		ok     bool
	}{
		{"Retry-After first", 429, withRetryAfter, `{"error":{"message":"Please try again in 20s."}}`, 3 * time.Second, true},
		{"then the message", 429, exhausted, `{"error":{"message":"Please try again in 20s."}}`, 20 * time.Second, true},
		{"then the reset of the bucket that ran out", 429, exhausted, `{"error":{"message":"slow down"}}`, 7660 * time.Millisecond, true},
		{"a reset is no wait on a 503", 503, exhausted, `{"error":{"message":"down"}}`, 0, false},
		{"nor when no bucket ran out", 429, http.Header{"X-Ratelimit-Remaining-Tokens": {"5"}, "X-Ratelimit-Reset-Tokens": {"1s"}}, ``, 0, false},
		{"an absurd wait in words is ignored", 429, nil, `{"error":{"message":"Please try again in 99999999h."}}`, 0, false},
		{"body fields before the message", 429, nil, `{"retry_after": 4, "error":{"message":"Please try again in 20s."}}`, 4 * time.Second, true},
	} {
		v := classifyResponse(tc.status, tc.h, []byte(tc.body), now, nil)
		if v.ServerWait != tc.want || v.HasServerWait != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, v.ServerWait, v.HasServerWait, tc.want, tc.ok)
		}
	}
}

func TestWhatOutweighsTheStatus(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		h      http.Header
		body   string
		want   Kind
	}{
		{"a 402 stays quota under RESOURCE_EXHAUSTED", 402, nil, `{"error":{"code":402,"message":"credits","status":"RESOURCE_EXHAUSTED"}}`, KindQuotaExhausted},
		{"an error type does not outweigh a 503", 503, nil, `{"error":{"type":"invalid_request_error","message":"x"}}`, KindTransient},
		{"a model larger than memory outweighs a 500", 500, nil, `{"error":"model requires more system memory (3.7 GiB) than is available (3.6 GiB)"}`, KindPermanent},
		{"a context wording outweighs a 500", 500, nil, `{"error":{"code":500,"message":"the request exceeds the available context size"}}`, KindContextOverflow},
		{"a stream event's own status", 0, nil, `{"error":{"code":429,"message":"Rate limit exceeded"}}`, KindRateLimited},
		{"a stream event's body outweighs its status", 0, nil, `{"error":{"message":"bad tool call","type":"invalid_request_error","status_code":400}}`, KindPermanent},
		{"Bedrock's type header", 400, http.Header{"X-Amzn-Errortype": {"ModelNotReadyException:x"}}, `{"message":"not ready"}`, KindTransient},
		{"a daily cap on a 429", 429, nil, `{"error":{"message":"Rate limit reached on tokens per day (TPD): Limit 500000, Used 499990, Requested 100. Please try again in 5m.","code":"rate_limit_exceeded"}}`, KindQuotaExhausted},
		{"a request larger than the whole limit", 413, nil, `{"error":{"message":"Request too large on tokens per minute (TPM): Limit 6000, Requested 9000","code":"rate_limit_exceeded"}}`, KindContextOverflow},
		{"a quota notice with a wait passes", 429, nil, `{"error":{"message":"You exceeded your current quota. Please retry in 3s.","status":"RESOURCE_EXHAUSTED"}}`, KindRateLimited},
		{"a quota notice without one does not", 429, nil, `{"error":{"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED"}}`, KindQuotaExhausted},
		{"a quota notice with a header's wait passes", 429, http.Header{"Retry-After": {"30"}}, `{"error":{"message":"You exceeded your current quota.","status":"RESOURCE_EXHAUSTED"}}`, KindRateLimited},
		{"Moonshot's daily cap", 429, nil, `{"error":{"message":"request reached organization TPD rate limit, current: 1526210, limit: 1500000","type":"rate_limit_reached_error"}}`, KindQuotaExhausted},
		{"a monthly trial cap", 429, nil, `{"message":"trial key is limited to 1000 API calls / month"}`, KindQuotaExhausted},
		{"a model named daily is no daily cap", 429, nil, `{"error":{"message":"Rate limit reached for daily-digest-8b on requests per minute","code":"rate_limit_exceeded"}}`, KindRateLimited},
		{"Zhipu's arrears", 429, nil, `{"error":{"code":"1113","message":"您的账户已欠费，请充值后重试。"}}`, KindQuotaExhausted},
		{"DashScope's input range", 400, nil, `{"code":"InvalidParameter","message":"Range of input length should be [1, 6000]"}`, KindContextOverflow},
		{"Moonshot's overload", 429, nil, `{"error":{"message":"The engine is currently overloaded, please try again later","type":"engine_overloaded_error"}}`, KindOverloaded},
		{"Bedrock's throttle in a stream", 0, nil, `{"message":"Too many tokens, please wait before trying again."}`, KindTransient},
		{"a relayed throttle naming its status", 0, nil, `{"error":{"code":"429","message":"Too many tokens, please wait before trying again."}}`, KindRateLimited},
		{"an embeddings batch too large", 400, nil, `{"object":"error","message":"Too many tokens in batch (max 16384)","type":"invalid_request_error"}`, KindContextOverflow},
		{"max_tokens alone beyond the window", 400, nil, `{"object":"error","message":"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens","type":"BadRequestError","code":400}`, KindPermanent},
		{"a busy server", 503, nil, `{"error":"The server is busy. Please try again later."}`, KindOverloaded},
		{"limit numbers outside a rate limit", 503, nil, `{"error":{"message":"concurrency limit 4 reached; requested 6"}}`, KindTransient},
		{"a plain-text daily cap", 429, nil, `Too many tokens per day, please wait before trying again.`, KindQuotaExhausted},
		{"a JSON string of spent credits", 429, nil, `"Your team has either used all available credits or reached its monthly spending limit."`, KindQuotaExhausted},
		{"an HTML page says nothing", 502, nil, `<html><body>Please try again in 5 days. Daily limit.</body></html>`, KindTransient},
		{"a capacity notice", 429, nil, `{"error":{"code":429,"message":"Unable to submit request because the service is temporarily out of capacity. Try again later.","status":"RESOURCE_EXHAUSTED"}}`, KindOverloaded},
	} {
		if v := ClassifyResponse(tc.status, tc.h, []byte(tc.body)); v.Kind != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, v.Kind, tc.want)
		}
	}
}
