package header

import (
	"net/http"
	"testing"
	"time"
)

// The fuzz targets feed the parsers whatever a server might send. Seeds
// live in testdata/fuzz; run one with, for example,
//
//	go test -run '^$' -fuzz FuzzWait -fuzztime 60s ./internal/header

var fuzzNow = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestWait(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	date := func(t time.Time) string { return t.Format(http.TimeFormat) }
	for _, tc := range []struct {
		name string
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{"none", http.Header{}, 0, false},
		{"seconds", http.Header{"Retry-After": {"1"}}, time.Second, true},
		{"zero seconds", http.Header{"Retry-After": {"0"}}, 0, true},
		{"spaces", http.Header{"Retry-After": {" 7 "}}, 7 * time.Second, true},
		{"ms wins", http.Header{"Retry-After": {"5"}, "Retry-After-Ms": {"1500.5"}}, 1500500 * time.Microsecond, true},
		{"bad ms falls back", http.Header{"Retry-After": {"5"}, "Retry-After-Ms": {"soon"}}, 5 * time.Second, true},
		{"negative ms falls back", http.Header{"Retry-After": {"5"}, "Retry-After-Ms": {"-3"}}, 5 * time.Second, true},
		{"NaN ms", http.Header{"Retry-After-Ms": {"NaN"}}, 0, false},
		{"negative seconds", http.Header{"Retry-After": {"-1"}}, 0, false},
		{"fraction seconds", http.Header{"Retry-After": {"1.5"}}, 0, false},
		{"garbage", http.Header{"Retry-After": {"tomorrow-ish"}}, 0, false},
		{"absurd seconds", http.Header{"Retry-After": {"99999999999999999999"}}, 0, false},
		{"huge but parsable seconds", http.Header{"Retry-After": {"9223372036854775807"}}, 0, false},
		{"an hour", http.Header{"Retry-After": {"3600"}}, time.Hour, true},
		{"a day and more", http.Header{"Retry-After": {"90000"}}, 25 * time.Hour, true},
		{"two years", http.Header{"Retry-After": {"63072000"}}, 0, false},
		{"absurd ms", http.Header{"Retry-After-Ms": {"1e300"}}, 0, false},
		{"date", http.Header{"Retry-After": {date(now.Add(90 * time.Second))}}, 90 * time.Second, true},
		{"date against Date header", http.Header{"Retry-After": {date(now.Add(time.Hour + 30*time.Second))}, "Date": {date(now.Add(time.Hour))}}, 30 * time.Second, true},
		{"date in the past", http.Header{"Retry-After": {date(now.Add(-time.Minute))}}, 0, true},
		{"date absurdly far", http.Header{"Retry-After": {date(now.AddDate(5, 0, 0))}}, 0, false},
	} {
		got, ok := Wait(tc.h, func() time.Time { return now })
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: (%v, %v), want (%v, %v)", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestRateLimits(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	openai := http.Header{}
	openai.Set("X-Ratelimit-Limit-Requests", "500")
	openai.Set("X-Ratelimit-Remaining-Requests", "499")
	openai.Set("X-Ratelimit-Reset-Requests", "120ms")
	openai.Set("X-Ratelimit-Limit-Tokens", "30000")
	openai.Set("X-Ratelimit-Remaining-Tokens", "29000")
	openai.Set("X-Ratelimit-Reset-Tokens", "6m0s")
	rl, ok := RateLimits(openai, now)
	want := Limits{
		Requests:    Quota{Limit: 500, Remaining: 499, Reset: 120 * time.Millisecond, HasReset: true},
		Tokens:      Quota{Limit: 30000, Remaining: 29000, Reset: 6 * time.Minute, HasReset: true},
		InputTokens: Quota{Limit: -1, Remaining: -1}, OutputTokens: Quota{Limit: -1, Remaining: -1},
	}
	if !ok || rl != want {
		t.Fatalf("openai: %+v %v\nwant %+v", rl, ok, want)
	}

	anthropic := http.Header{}
	anthropic.Set("Anthropic-Ratelimit-Requests-Limit", "50")
	anthropic.Set("Anthropic-Ratelimit-Requests-Remaining", "49")
	anthropic.Set("Anthropic-Ratelimit-Requests-Reset", now.Add(3*time.Second).Format(time.RFC3339))
	anthropic.Set("Anthropic-Ratelimit-Tokens-Reset", now.Add(-time.Second).Format(time.RFC3339))
	anthropic.Set("Anthropic-Ratelimit-Input-Tokens-Remaining", "garbage")
	rl, ok = RateLimits(anthropic, now)
	if !ok || rl.Requests != (Quota{Limit: 50, Remaining: 49, Reset: 3 * time.Second, HasReset: true}) ||
		rl.Tokens != (Quota{Limit: -1, Remaining: -1, Reset: 0, HasReset: true}) || rl.InputTokens.Remaining != -1 {
		t.Fatalf("anthropic: %+v %v", rl, ok)
	}

	bad := http.Header{}
	bad.Set("X-Ratelimit-Reset-Requests", "-5s")
	bad.Set("X-Ratelimit-Reset-Tokens", "99999999h")
	if rl, ok := RateLimits(bad, now); ok || rl.Requests.HasReset || rl.Tokens.HasReset {
		t.Fatalf("malformed resets: %+v %v", rl, ok)
	}
	if _, ok := RateLimits(http.Header{}, now); ok {
		t.Fatal("no headers, yet found")
	}
}

func FuzzWait(f *testing.F) {
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
		d, ok := Wait(h, func() time.Time { return fuzzNow })
		checkHint(t, d, ok)
	})
}

func FuzzRateLimits(f *testing.F) {
	f.Add("500", "499", "1s", "6m0s", "2026-11-29T12:00:03Z")
	f.Add("-1", "x", "12ms", "-5s", "not a time")
	f.Add("9223372036854775808", "", "99999999h", "1.5h", "9999-12-31T23:59:59Z")
	f.Fuzz(func(t *testing.T, limit, remaining, resetRequests, resetTokens, resetAnthropic string) {
		h := http.Header{}
		h.Set("X-Ratelimit-Limit-Requests", limit)
		h.Set("X-Ratelimit-Remaining-Requests", remaining)
		h.Set("X-Ratelimit-Reset-Requests", resetRequests)
		h.Set("X-Ratelimit-Reset-Tokens", resetTokens)
		rl, _ := RateLimits(h, fuzzNow)
		a := http.Header{}
		a.Set("Anthropic-Ratelimit-Tokens-Limit", limit)
		a.Set("Anthropic-Ratelimit-Tokens-Reset", resetAnthropic)
		al, _ := RateLimits(a, fuzzNow)
		for _, q := range []Quota{rl.Requests, rl.Tokens, al.Tokens} {
			if q.Limit < -1 || q.Remaining < -1 {
				t.Fatalf("negative count %+v", q)
			}
			checkHint(t, q.Reset, q.HasReset)
		}
	})
}

func checkHint(t *testing.T, d time.Duration, ok bool) {
	t.Helper()
	if ok && (d < 0 || d > MaxHint) {
		t.Fatalf("hint %v outside [0, %v]", d, MaxHint)
	}
	if !ok && d != 0 {
		t.Fatalf("no hint, yet %v", d)
	}
}

func TestExhaustedReset(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{"tokens ran out", http.Header{
			"X-Ratelimit-Remaining-Requests": {"7"}, "X-Ratelimit-Reset-Requests": {"6m0s"},
			"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Reset-Tokens": {"7.66s"},
		}, 7660 * time.Millisecond, true},
		{"both ran out", http.Header{
			"X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"2s"},
			"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Reset-Tokens": {"12ms"},
		}, 2 * time.Second, true},
		{"anthropic input tokens", http.Header{
			"Anthropic-Ratelimit-Input-Tokens-Remaining": {"0"},
			"Anthropic-Ratelimit-Input-Tokens-Reset":     {"2026-01-01T00:00:30Z"},
			"Anthropic-Ratelimit-Requests-Remaining":     {"40"},
			"Anthropic-Ratelimit-Requests-Reset":         {"2026-01-01T00:00:50Z"},
		}, 30 * time.Second, true},
		{"none ran out", http.Header{"X-Ratelimit-Remaining-Tokens": {"10"}, "X-Ratelimit-Reset-Tokens": {"1s"}}, 0, false},
		{"ran out, no reset", http.Header{"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Reset-Requests": {"1s"}}, 0, false},
		{"absurd reset", http.Header{"X-Ratelimit-Remaining-Tokens": {"0"}, "X-Ratelimit-Reset-Tokens": {"99999999h"}}, 0, false},
		{"no headers", http.Header{}, 0, false},
	} {
		if d, ok := ExhaustedReset(tc.h, now); d != tc.want || ok != tc.ok {
			t.Errorf("%s: %v %v, want %v %v", tc.name, d, ok, tc.want, tc.ok)
		}
	}
}
