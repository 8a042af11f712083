package provider

import (
	"net/http"
	"testing"
	"time"
)

func TestParseShapes(t *testing.T) {
	for _, tc := range []struct {
		name, body            string
		msg, typ, code, state string
	}{
		{"openai", `{"error":{"message":"m","type":"t","param":null,"code":"c"}}`, "m", "t", "c", ""},
		{"top level", `{"object":"error","message":"m","type":"t","param":null,"code":"1300"}`, "m", "t", "1300", ""},
		{"numeric status", `{"error":{"message":"m","code":"content_filter","status":400}}`, "m", "", "content_filter", ""},
		{"numeric code", `{"error":{"code":429,"message":"m","status":"RESOURCE_EXHAUSTED"}}`, "m", "", "", "RESOURCE_EXHAUSTED"},
		{"array", `[{"error":{"code":429,"message":"m","status":"RESOURCE_EXHAUSTED"}}]`, "m", "", "", "RESOURCE_EXHAUSTED"},
		{"string error", `{"error":"m","error_type":"validation"}`, "m", "validation", "", ""},
		{"capitalised", `{"Message":"m"}`, "m", "", "", ""},
		{"detail", `{"detail":"m"}`, "m", "", "", ""},
		{"type object", `{"error":{"message":"m","type":{"x":1},"code":["c"]}}`, "m", "", "", ""},
		{"anthropic", `{"type":"error","error":{"type":"t","message":"m"}}`, "m", "t", "", ""},
		{"openrouter raw", `{"error":{"code":400,"message":"m","metadata":{"raw":"r"}}}`, "m\nr", "", "", ""},
	} {
		pe, ok := Parse([]byte(tc.body))
		if !ok || pe.Message != tc.msg || pe.Type != tc.typ || pe.Code != tc.code || pe.Status != tc.state {
			t.Errorf("%s: %+v %v", tc.name, pe, ok)
		}
	}
	for _, body := range []string{``, `[]`, `[1]`, `"x"`, `{}`, `{"type":"error"}`, `{"error":null}`, `{"error":7}`, `not json`} {
		if pe, ok := Parse([]byte(body)); ok {
			t.Errorf("%q: parsed as %+v", body, pe)
		}
	}
}

func TestReadPlainBodies(t *testing.T) {
	for body, want := range map[string]string{
		"Too many tokens per day, please wait before trying again.":       "Too many tokens per day, please wait before trying again.",
		`"Tokens per minute limit exceeded - too many tokens processed."`: "Tokens per minute limit exceeded - too many tokens processed.",
		"  Insufficient Balance\n":                                        "Insufficient Balance",
	} {
		if pe, ok := Read(http.Header{}, []byte(body)); !ok || pe.Message != want {
			t.Errorf("%q: %q %v", body, pe.Message, ok)
		}
	}
	for _, body := range []string{"", "<html><body>502 Bad Gateway: try again in 5s, daily</body></html>", "\xff\xfe", `""`, "{broken"} {
		if pe, ok := Read(http.Header{}, []byte(body)); ok {
			t.Errorf("%q: read as %+v", body, pe)
		}
	}
}

func TestReadBedrockHeader(t *testing.T) {
	h := http.Header{"X-Amzn-Errortype": {"ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/"}}
	pe, ok := Read(h, []byte(`{"message":"Too many tokens, please wait before trying again."}`))
	if !ok || pe.Type != "ThrottlingException" {
		t.Fatalf("%+v %v", pe, ok)
	}
	if c := pe.Class(429); c != RateLimited {
		t.Errorf("class %v, want rate limited", c)
	}
	if pe, ok := Read(h, nil); !ok || pe.Type != "ThrottlingException" {
		t.Errorf("header alone: %+v %v", pe, ok)
	}
}

func TestMessageWait(t *testing.T) {
	for msg, want := range map[string]time.Duration{
		"Please try again in 20s. Visit https://x":          20 * time.Second,
		"Please try again in 7.66s.":                        7660 * time.Millisecond,
		"Please try again in 859ms.":                        859 * time.Millisecond,
		"Please try again in 1m30.5s":                       90500 * time.Millisecond,
		"Please try again in 2m59.56s":                      179560 * time.Millisecond,
		"Please retry after 6 seconds.":                     6 * time.Second,
		"Try again in 1 second":                             time.Second,
		"Please retry in 37.7s.":                            37700 * time.Millisecond,
		"try again in 1 minute 30 seconds":                  90 * time.Second,
		"Try again in 86400 seconds.":                       24 * time.Hour,
		"please wait before trying again. Try again in 3s.": 3 * time.Second,
		"try again in 1 minute and 30 seconds.":             90 * time.Second,
		"try again in 1 hour, 30 minutes":                   90 * time.Minute,
		"try again in 20s, and 5 more requests":             20 * time.Second,
	} {
		if d, ok := MessageWait(msg); !ok || d != want {
			t.Errorf("%q: %v %v, want %v", msg, d, ok, want)
		}
	}
	for _, msg := range []string{
		"", "Please try again later.", "try again in a moment", "retry in 5", "try again in 5 fortnights",
		"try again in 99999999999999999999 hours", "try again in 1e9s", "try again in .s", "try again in 1.2.3s",
		"retry in 400 days",
	} {
		if d, ok := MessageWait(msg); ok {
			t.Errorf("%q: read %v", msg, d)
		}
	}
}

func TestBeyondLimit(t *testing.T) {
	for msg, want := range map[string]bool{
		"on tokens per min (tpm): limit 30000, requested 45000.":            true,
		"on tokens per minute (tpm): limit 7000, used 0, requested ~12903.": true,
		"limit: 1,000, requested: 2,000":                                    true,
		"on requests per day (rpd): limit 200, used 200, requested 1.":      false,
		"rate limit reached, requested 5":                                   false,
		"limit 10, requested":                                               false,
	} {
		if got := beyondLimit(msg); got != want {
			t.Errorf("%q: %v", msg, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"error":{"message":"m","type":"t","code":"c","status":400,"innererror":{"code":"x"}}}`,
		`[{"error":{"code":429,"message":"Please retry in 3s","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"3s"},{"@type":"type.googleapis.com/google.rpc.ErrorInfo","metadata":{"quota_limit":"PerDay"}}]}}]`,
		`{"object":"error","message":"m","type":"t","code":400}`,
		`{"error":"m","error_type":"overloaded"}`,
		`{"error":{"code":429,"message":"m","metadata":{"raw":"{\"error\":1}"}}}`,
		`{"estimated_time":12.5,"error":"loading"}`,
	} {
		f.Add([]byte(s), 429)
	}
	f.Fuzz(func(t *testing.T, body []byte, status int) {
		pe, ok := Parse(body)
		if !ok {
			return
		}
		_ = pe.Class(status)
		if d, ok := pe.Wait(); ok && (d < 0 || d > 366*24*time.Hour) {
			t.Fatalf("wait %v out of bounds", d)
		}
		typ, code := pe.Identifiers()
		if len(typ) > maxIdentifier || len(code) > maxIdentifier {
			t.Fatalf("identifiers too long: %q %q", typ, code)
		}
	})
}

func FuzzMessageWait(f *testing.F) {
	for _, s := range []string{"Please try again in 1m30.5s.", "retry after 6 seconds", "try again in 859ms", "wait 1h2m3s", "retry in 9999999999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		d, ok := MessageWait(msg)
		if ok && (d < 0 || d > 366*24*time.Hour) {
			t.Fatalf("%q: wait %v out of bounds", msg, d)
		}
		if !ok && d != 0 {
			t.Fatalf("%q: %v without ok", msg, d)
		}
	})
}
