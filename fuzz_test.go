package rebound

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// The fuzz targets feed the hint and body parsers whatever a server might
// send. Seeds live in testdata/fuzz; run one with, for example,
//
//	go test -run '^$' -fuzz FuzzClassifyResponse -fuzztime 60s .

var fuzzNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func checkHint(t *testing.T, d time.Duration, ok bool) {
	t.Helper()
	if ok && (d < 0 || d > MaxHint) {
		t.Fatalf("hint %v outside [0, %v]", d, MaxHint)
	}
	if !ok && d != 0 {
		t.Fatalf("no hint, yet %v", d)
	}
}

func FuzzServerWaitHint(f *testing.F) {
	f.Add("", "1", "")
	f.Add("1500.5", "2", "")
	f.Add("", "Wed, 21 Oct 2026 07:28:00 GMT", "Wed, 21 Oct 2026 07:27:00 GMT")
	f.Add("-1", "-1", "garbage")
	f.Add("1e308", "99999999999999999999", "")
	f.Add("NaN", "Inf", "")
	f.Fuzz(func(t *testing.T, ms, after, date string) {
		h := http.Header{}
		h.Set("Retry-After-Ms", ms)
		h.Set("Retry-After", after)
		h.Set("Date", date)
		d, ok := ServerWaitHint(h, fuzzNow)
		checkHint(t, d, ok)
	})
}

func FuzzClassifyResponse(f *testing.F) {
	f.Add(429, "", "", []byte(`{"error":{"code":"insufficient_quota","type":"insufficient_quota"}}`))
	f.Add(529, "true", "3", []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`))
	f.Add(429, "", "", []byte(`{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"53s"}]}}`))
	f.Add(400, "false", "", []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 5 tokens > 4 maximum"}}`))
	f.Add(503, "", "", []byte(`{"error":"busy","retry_after":"1e9"}`))
	f.Add(0, "", "", []byte(`{"error":{"details":[{"@type":null}]}}`))
	f.Fuzz(func(t *testing.T, status int, shouldRetry, retryAfter string, body []byte) {
		h := http.Header{}
		h.Set("X-Should-Retry", shouldRetry)
		h.Set("Retry-After", retryAfter)
		v := ClassifyResponse(status, h, body)
		if v.Kind > KindCanceled || v.Kind == KindCanceled {
			t.Fatalf("kind %v from an HTTP response", v.Kind)
		}
		checkHint(t, v.ServerWait, v.HasServerWait)
	})
}

func FuzzParseRateLimit(f *testing.F) {
	f.Add("500", "499", "1s", "6m0s", "2026-11-29T12:00:03Z")
	f.Add("-1", "x", "12ms", "-5s", "not a time")
	f.Add("9223372036854775808", "", "99999999h", "1.5h", "9999-12-31T23:59:59Z")
	f.Fuzz(func(t *testing.T, limit, remaining, resetRequests, resetTokens, resetAnthropic string) {
		h := http.Header{}
		h.Set("X-Ratelimit-Limit-Requests", limit)
		h.Set("X-Ratelimit-Remaining-Requests", remaining)
		h.Set("X-Ratelimit-Reset-Requests", resetRequests)
		h.Set("X-Ratelimit-Reset-Tokens", resetTokens)
		rl, _ := ParseRateLimit(h, fuzzNow)
		a := http.Header{}
		a.Set("Anthropic-Ratelimit-Tokens-Limit", limit)
		a.Set("Anthropic-Ratelimit-Tokens-Reset", resetAnthropic)
		al, _ := ParseRateLimit(a, fuzzNow)
		for _, q := range []Quota{rl.Requests, rl.Tokens, al.Tokens} {
			if q.Limit < -1 || q.Remaining < -1 {
				t.Fatalf("negative count %+v", q)
			}
			checkHint(t, q.Reset, q.HasReset)
		}
	})
}

// FuzzPolicyJSON: reading any bytes as a policy either fails with an error
// or gives a valid policy whose JSON form reads back to the same JSON.
func FuzzPolicyJSON(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"base_delay_ms":0,"max_delay_ms":300,"jitter":"equal","per_kind":{"rate_limited":{"max_attempts":6}}}`))
	f.Add([]byte(`{"max_attempts":-1,"multiplier":0.5}`))
	f.Add([]byte(`{"wait_budget_ms":9223372036854775807}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Policy
		if json.Unmarshal(data, &p) != nil {
			return
		}
		if err := p.Validate(); err != nil {
			t.Fatalf("accepted an invalid policy: %v", err)
		}
		out, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("cannot marshal an accepted policy: %v", err)
		}
		var q Policy
		if err := json.Unmarshal(out, &q); err != nil {
			t.Fatalf("cannot read back %s: %v", out, err)
		}
		again, _ := json.Marshal(q)
		if string(again) != string(out) {
			t.Fatalf("round trip changed %s into %s", out, again)
		}
	})
}
