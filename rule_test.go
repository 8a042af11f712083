package rebound

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestRulesComeFirst(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	// A provider whose per-minute limit reads like an exhausted quota, and
	// a gateway that says "busy" with a 500.
	rules := []Rule{
		{Status: 429, Message: "quota exceeded for this minute", Kind: KindRateLimited, Wait: time.Minute},
		{Header: "X-Gateway", HeaderContains: "BUSY", Kind: KindOverloaded},
		{Type: "ThrottlingException", Kind: KindQuotaExhausted},
		{Code: "tier_closed", Kind: KindPermanent},
		{Message: "please compact", Kind: KindContextOverflow},
	}
	for _, tc := range []struct {
		name   string
		status int
		h      http.Header
		body   string
		want   Verdict
	}{
		{"message and status, the rule's wait", 429, nil,
			`{"error":{"message":"Quota exceeded for this minute","code":"insufficient_quota"}}`,
			Verdict{Kind: KindRateLimited, ServerWait: time.Minute, HasServerWait: true}},
		{"the response's own wait wins", 429, http.Header{"Retry-After": {"7"}},
			`{"error":{"message":"Quota exceeded for this minute"}}`,
			Verdict{Kind: KindRateLimited, ServerWait: 7 * time.Second, HasServerWait: true}},
		{"status does not match", 403, nil, `{"error":{"message":"Quota exceeded for this minute"}}`,
			Verdict{Kind: KindPermanent}},
		{"header, ignoring case", 500, http.Header{"X-Gateway": {"node-1 busy"}}, `oops`, Verdict{Kind: KindOverloaded}},
		{"header value absent", 500, http.Header{"X-Gateway": {"node-1"}}, `oops`, Verdict{Kind: KindTransient}},
		{"Bedrock's type header", 429, http.Header{"X-Amzn-Errortype": {"ThrottlingException:http://internal.amazon.com/coral/"}},
			`{"message":"Too many requests"}`, Verdict{Kind: KindQuotaExhausted}},
		{"code", 503, nil, `{"error":{"message":"x","code":"TIER_CLOSED"}}`, Verdict{Kind: KindPermanent}},
		{"a body in no shape is matched whole", 500, nil, `<html>please compact</html>`, Verdict{Kind: KindContextOverflow}},
		{"no rule: the built-in verdict", 429, nil, `{"error":{"message":"slow down"}}`, Verdict{Kind: KindRateLimited}},
	} {
		if got := classifyResponse(tc.status, tc.h, []byte(tc.body), now, rules); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	stream := &StreamError{Data: []byte(`{"type":"error","error":{"type":"api_error","message":"Please compact"}}`)}
	if got := classify(stream, now, rules); got.Kind != KindContextOverflow {
		t.Errorf("stream error: %+v", got)
	}
	if got := classify(Permanent(&HTTPError{StatusCode: 500, Body: []byte("please compact")}), now, rules); got.Kind != KindPermanent {
		t.Errorf("a Permanent mark outside the response: %+v", got)
	}
}

func TestRulesInDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		busy := &HTTPError{StatusCode: 429, Body: []byte(`{"error":{"message":"Daily limit reached, upgrade your plan"}}`)}
		calls := 0
		p := Policy{Rules: []Rule{{Status: 429, Message: "upgrade your plan", Kind: KindQuotaExhausted}}}
		_, err := Do(t.Context(), p, func(context.Context) (string, error) { calls++; return "", busy })
		var gu *GiveUpError
		if !errors.As(err, &gu) || gu.Reason != StopNotRetryable || calls != 1 {
			t.Fatalf("%v after %d calls", err, calls)
		}
		// Rules come before a custom classifier too; the classifier sees
		// what no rule matched.
		calls = 0
		p.Classifier = func(error) Verdict { return Verdict{Kind: KindTransient} }
		_, err = Do(t.Context(), p, func(context.Context) (string, error) { calls++; return "", busy })
		if calls != 1 {
			t.Fatalf("with a classifier: %v after %d calls", err, calls)
		}
		calls = 0
		other := &HTTPError{StatusCode: 400}
		_, _ = Do(t.Context(), p, func(context.Context) (string, error) { calls++; return "", other })
		if calls != 3 {
			t.Fatalf("the classifier's verdict on what no rule matched: %d calls", calls)
		}
	})
}

func TestRuleErrors(t *testing.T) {
	for _, tc := range []struct {
		rule Rule
		want string
	}{
		{Rule{Kind: KindPermanent}, "rules[0]: matches every failure; set at least one of status, header, type, code, message"},
		{Rule{Status: 42}, "rules[0].status: want an HTTP status from 100 to 599, got 42"},
		{Rule{HeaderContains: "x"}, "rules[0].header_contains: needs header, the name of the header to look in"},
		{Rule{Header: "Retry After"}, `rules[0].header: "Retry After" is not a header name`},
		{Rule{Code: "x", Kind: KindCanceled}, "rules[0].kind: canceled is the caller's own doing; a response cannot be"},
		{Rule{Code: "x", Kind: 99}, "rules[0].kind: unknown value 99"},
		{Rule{Code: "x", Wait: -time.Second}, "rules[0].wait_ms: must not be negative (got -1s)"},
		{Rule{Code: "x", Wait: 400 * 24 * time.Hour}, "rules[0].wait_ms: 9600h0m0s is longer than a year"},
		{Rule{Code: "x", Wait: time.Minute}, "rules[0].wait_ms: 60000 is more than the policy waits (30000, the lesser of wait_budget_ms and max_server_wait_ms): the call would stop instead"},
		{Rule{Header: "X-Gateway(busy)"}, `rules[0].header: "X-Gateway(busy)" is not a header name`},
	} {
		err := Policy{Rules: []Rule{tc.rule}}.Validate()
		if err == nil || err.Error() != "rebound: policy: "+tc.want {
			t.Errorf("%+v: %v, want %q", tc.rule, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		`{"rules":{}}`:                                                        `rules: want an array of rules, got an object`,
		`{"rules":[1]}`:                                                       `rules[0]: want an object, got 1`,
		`{"rules":[{"status":429}]}`:                                          `rules[0].kind: missing (want transient, rate_limited, overloaded, quota_exhausted, context_overflow or permanent)`,
		`{"rules":[{"status":429,"kind":"x"}]}`:                               `rules[0].kind: unknown value "x" (want transient, rate_limited, overloaded, quota_exhausted, context_overflow or permanent)`,
		`{"rules":[{"status":"429","kind":"permanent"}]}`:                     `rules[0].status: want an HTTP status, got "429"`,
		`{"rules":[{"message":5,"kind":"permanent"}]}`:                        `rules[0].message: want a string, got 5`,
		`{"rules":[{"msg":"x","kind":"permanent"}]}`:                          `rules[0]: unknown key "msg" (want status, header, header_contains, type, code, message, kind or wait_ms)`,
		`{"rules":[{"code":"x","kind":"canceled"}]}`:                          `rules[0].kind: canceled is the caller's own doing; a response cannot be`,
		`{"rules":[{"code":"x","kind":"permanent","wait_ms":-1}]}`:            `rules[0].wait_ms: must not be negative (got -1)`,
		`{"rules":[{"code":"x","kind":"rate_limited"},{"kind":"permanent"}]}`: `rules[1]: matches every failure; set at least one of status, header, type, code, message`,
	} {
		var p Policy
		err := p.UnmarshalJSON([]byte(in))
		if err == nil || err.Error() != "rebound: policy: "+want {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: more than one line: %q", in, err)
		}
	}
}

func TestRulesJSONRoundTrip(t *testing.T) {
	in := `{"rules":[{"status":429,"message":"per minute","kind":"rate_limited","wait_ms":20000},` +
		`{"header":"x-gateway","header_contains":"busy","type":"t","code":"c","kind":"overloaded","wait_ms":0}]}`
	var p Policy
	if err := json.Unmarshal([]byte(in), &p); err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Status: 429, Message: "per minute", Kind: KindRateLimited, Wait: 20 * time.Second},
		{Header: "x-gateway", HeaderContains: "busy", Type: "t", Code: "c", Kind: KindOverloaded, Wait: NoDelay},
	}
	if len(p.Rules) != 2 || p.Rules[0] != want[0] || p.Rules[1] != want[1] {
		t.Fatalf("%+v", p.Rules)
	}
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var q Policy
	if err := json.Unmarshal(out, &q); err != nil || len(q.Rules) != 2 || q.Rules[0] != want[0] || q.Rules[1] != want[1] {
		t.Fatalf("%s read back as %+v: %v", out, q.Rules, err)
	}
}

func TestRulesYieldToMarksAndToTheServersNo(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }
	rules := []Rule{{Status: 503, Kind: KindOverloaded}, {Status: 429, Kind: KindRateLimited, Wait: NoDelay}}
	marked := Permanent(&HTTPError{StatusCode: 503})
	if v, ok := ruleVerdict(marked, now, rules); ok {
		t.Errorf("a rule outweighed a Permanent mark: %+v", v)
	}
	if v, ok := ruleVerdict(fmt.Errorf("wrapped: %w", &HTTPError{StatusCode: 503}), now, rules); !ok || v.Kind != KindOverloaded {
		t.Errorf("a wrapped response: %+v %v", v, ok)
	}
	no := &HTTPError{StatusCode: 429, Header: http.Header{"X-Should-Retry": {"false"}}}
	if v := classify(no, now, rules); v.Kind != KindPermanent {
		t.Errorf("x-should-retry: false under a retrying rule: %+v", v)
	}
	if v := classify(&HTTPError{StatusCode: 429}, now, rules); v.Kind != KindRateLimited || !v.HasServerWait || v.ServerWait != 0 {
		t.Errorf("NoDelay: %+v", v)
	}
}
