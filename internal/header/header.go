// Package header reads what a provider's response headers say about
// waiting: the wait a failed response asks for (retry-after-ms,
// Retry-After), and how much of each rate limit is left and when it resets
// (OpenAI's x-ratelimit-*, Anthropic's anthropic-ratelimit-*).
//
// A reset says when a quota is full again, not when to retry: it feeds a
// rate limiter. Only on a 429 that gives no Retry-After is the reset of
// the limit that ran out a wait (ExhaustedReset): the server said the call
// was refused and when the limit at fault comes back. Every value is bounded: negative,
// malformed or absurd ones (beyond MaxHint) are treated as absent, and
// nothing overflows.
package header

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// MaxHint is the longest wait taken at face value: a year. A hint up to it
// is a real request to wait, however long; a longer one, like a date
// decades away or 1e300 seconds, is absurd and ignored.
const MaxHint = 365 * 24 * time.Hour

// Wait returns the wait h asks for: retry-after-ms (float milliseconds),
// else Retry-After as delay-seconds or an HTTP-date. An HTTP-date is
// measured from the response's Date header, else from now(); a date in the
// past asks for no wait. now is called only for such a date.
func Wait(h http.Header, now func() time.Time) (time.Duration, bool) {
	if s := strings.TrimSpace(h.Get("Retry-After-Ms")); s != "" {
		ms, err := strconv.ParseFloat(s, 64)
		if err == nil && ms >= 0 && ms <= float64(MaxHint/time.Millisecond) {
			return time.Duration(ms * float64(time.Millisecond)), true
		}
	}
	s := strings.TrimSpace(h.Get("Retry-After"))
	if s == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(s, 10, 64); err == nil {
		if secs > uint64(MaxHint/time.Second) {
			return 0, false
		}
		return time.Duration(secs) * time.Second, true
	}
	at, err := http.ParseTime(s)
	if err != nil {
		return 0, false
	}
	if date, err := http.ParseTime(h.Get("Date")); err == nil {
		return Until(at, date)
	}
	return Until(at, now())
}

// Until returns the wait from now until at: none for a time already past;
// false for one beyond MaxHint, which is absurd.
func Until(at, now time.Time) (time.Duration, bool) {
	d := at.Sub(now)
	switch {
	case d < 0:
		return 0, true
	case d > MaxHint:
		return 0, false
	}
	return d, true
}

// Seconds parses a non-negative decimal number of seconds no larger than
// MaxHint, as wait hints in bodies give them ("53", "1.5").
func Seconds(s string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || !(f >= 0) || f > MaxHint.Seconds() {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// Quota is what a provider's rate-limit headers say about one limit.
type Quota struct {
	// Limit and Remaining are the limit and what is left of it; -1 when
	// the header is absent or malformed.
	Limit, Remaining int64
	// Reset is how long until the limit is fully replenished; meaningful
	// when HasReset is set.
	Reset    time.Duration
	HasReset bool
}

// Limits is what a response's rate-limit headers say: OpenAI's
// x-ratelimit-{limit,remaining,reset}-{requests,tokens} and Anthropic's
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-*.
type Limits struct {
	Requests, Tokens, InputTokens, OutputTokens Quota
}

// quotaHeaders names the headers of one limit, in canonical form: they are
// looked up in the header map as they are, not canonicalized again on
// every response.
type quotaHeaders struct{ limit, remaining, reset string }

var (
	openAIHeaders = [...]quotaHeaders{
		{"X-Ratelimit-Limit-Requests", "X-Ratelimit-Remaining-Requests", "X-Ratelimit-Reset-Requests"},
		{"X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens"},
	}
	anthropicHeaders = [...]quotaHeaders{
		{"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
		{"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
		{"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
		{"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
	}
)

// present reports whether h has any of q's headers.
func (q quotaHeaders) present(h http.Header) bool {
	return get(h, q.limit) != "" || get(h, q.remaining) != "" || get(h, q.reset) != ""
}

// get is h.Get for a key already in canonical form.
func get(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// RateLimits reads the rate-limit headers of a response received at now
// (the Date header, if any, is preferred, as for Retry-After). It reports
// false when there are none.
func RateLimits(h http.Header, now time.Time) (Limits, bool) {
	none := Quota{Limit: -1, Remaining: -1}
	rl := Limits{Requests: none, Tokens: none, InputTokens: none, OutputTokens: none}
	found := false
	read := func(q *Quota, names quotaHeaders, reset func(string) (time.Duration, bool)) {
		q.Limit, q.Remaining = count(h, names.limit), count(h, names.remaining)
		q.Reset, q.HasReset = reset(get(h, names.reset))
		found = found || q.Limit >= 0 || q.Remaining >= 0 || q.HasReset
	}
	if openAIHeaders[0].present(h) || openAIHeaders[1].present(h) {
		read(&rl.Requests, openAIHeaders[0], resetIn)
		read(&rl.Tokens, openAIHeaders[1], resetIn)
		return rl, found
	}
	quotas := [...]*Quota{&rl.Requests, &rl.Tokens, &rl.InputTokens, &rl.OutputTokens}
	dated := false
	for i, names := range anthropicHeaders {
		if !names.present(h) {
			continue
		}
		if !dated {
			dated = true
			if date, err := http.ParseTime(get(h, "Date")); err == nil {
				now = date
			}
		}
		read(quotas[i], names, func(s string) (time.Duration, bool) { return resetAt(s, now) })
	}
	return rl, found
}

// count reads a non-negative count; -1 for one absent or malformed.
func count(h http.Header, canonicalKey string) int64 {
	v := strings.TrimSpace(get(h, canonicalKey))
	if v == "" {
		return -1 // absent: no error to make, on every response
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// resetIn reads an OpenAI reset such as "1s", "6m0s" or "12ms".
func resetIn(s string) (time.Duration, bool) {
	if s = strings.TrimSpace(s); s == "" {
		return 0, false
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 || d > MaxHint {
		return 0, false
	}
	return d, true
}

// resetAt reads an Anthropic reset, an RFC 3339 time, as a duration from
// now; a time in the past is a reset already done.
func resetAt(s string, now time.Time) (time.Duration, bool) {
	if s = strings.TrimSpace(s); s == "" {
		return 0, false
	}
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0, false
	}
	return Until(at, now)
}

// ExhaustedReset returns how long until the rate limit that ran out
// resets: the reset of each limit whose remaining count is zero, the
// longest if several ran out. It reports false when no limit says it ran
// out and when one that did gives no reset: a 429 that says only that
// some limit was hit does not say which one to wait for.
func ExhaustedReset(h http.Header, now time.Time) (time.Duration, bool) {
	rl, ok := RateLimits(h, now)
	if !ok {
		return 0, false
	}
	var wait time.Duration
	found := false
	for _, q := range [...]Quota{rl.Requests, rl.Tokens, rl.InputTokens, rl.OutputTokens} {
		if q.Remaining != 0 {
			continue
		}
		if !q.HasReset {
			return 0, false
		}
		wait, found = max(wait, q.Reset), true
	}
	return wait, found
}
