package rebound

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rebound-go/rebound/internal/header"
)

// Provider rules live here, in the root package, so that the default
// classifier knows OpenAI, Anthropic and Gemini errors with no
// configuration: a Transport pointed at any of them, at a proxy in front of
// them, or at a test server that speaks their dialect just works. The
// rules read the JSON error body each provider sends:
//
//	OpenAI     {"error": {"message", "type", "param", "code"}}
//	Anthropic  {"type": "error", "error": {"type", "message", "details": {"error_code"}}}
//	Gemini     {"error": {"code", "message", "status", "details": [{"@type", ...}]}}

// quotaCodes are the OpenAI error types and codes that mean money or quota
// has run out: a retry cannot succeed, whatever the status says.
var quotaCodes = map[string]bool{
	"insufficient_quota":                true,
	"credit_balance_exhausted":          true,
	"organization_spend_limit_exceeded": true,
	"project_spend_limit_exceeded":      true,
	"organization_usage_limit_exceeded": true,
	"billing_error":                     true, // Anthropic's type
	"billing_hard_limit_reached":        true,
}

// permanentCodes are error types and statuses that no retry will change.
var permanentCodes = map[string]bool{
	"invalid_request_error":    true,
	"authentication_error":     true,
	"permission_error":         true,
	"not_found_error":          true,
	"content_policy_violation": true,
	"content_filter":           true,
	"invalid_api_key":          true,
	"model_not_found":          true,
	"INVALID_ARGUMENT":         true,
	"PERMISSION_DENIED":        true,
	"UNAUTHENTICATED":          true,
	"NOT_FOUND":                true,
	"FAILED_PRECONDITION":      true,
}

// providerError is the union of the three providers' error bodies.
type providerError struct {
	Message string
	Type    string // OpenAI type, Anthropic error.type
	Code    string // OpenAI code (a string); Gemini's numeric code is ignored
	Status  string // Gemini status, e.g. RESOURCE_EXHAUSTED
	// ErrorCode is Anthropic's error.details.error_code.
	ErrorCode string
	// QuotaIDs are Gemini's QuotaFailure violations' quota IDs.
	QuotaIDs []string
	// RetryDelay is Gemini's RetryInfo.retryDelay, if valid.
	RetryDelay    time.Duration
	HasRetryDelay bool
	// RetryAfter is a top-level body "retry_after" in seconds, if valid.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

type errorBodyJSON struct {
	Error      json.RawMessage `json:"error"`
	RetryAfter json.RawMessage `json:"retry_after"`
}

type errorJSON struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Code    json.RawMessage `json:"code"`
	Status  string          `json:"status"`
	Details json.RawMessage `json:"details"`
}

type detailJSON struct {
	Type       string `json:"@type"`
	RetryDelay string `json:"retryDelay"`
	Violations []struct {
		QuotaID string `json:"quotaId"`
	} `json:"violations"`
}

// parseProviderError reads an error body in any of the providers' shapes.
// It reports false for a body that is not JSON or has no error in it.
func parseProviderError(body []byte) (providerError, bool) {
	var pe providerError
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return pe, false
	}
	var top errorBodyJSON
	if json.Unmarshal(body, &top) != nil {
		return pe, false
	}
	pe.RetryAfter, pe.HasRetryAfter = parseSecondsJSON(top.RetryAfter)
	raw := bytes.TrimSpace(top.Error)
	switch {
	case len(raw) == 0:
		return pe, pe.HasRetryAfter
	case raw[0] == '"': // {"error": "message"}, as some proxies send
		_ = json.Unmarshal(raw, &pe.Message)
		return pe, true
	case raw[0] != '{':
		return pe, pe.HasRetryAfter
	}
	var e errorJSON
	if json.Unmarshal(raw, &e) != nil {
		return pe, pe.HasRetryAfter
	}
	pe.Message, pe.Type, pe.Status = e.Message, e.Type, e.Status
	if code := bytes.TrimSpace(e.Code); len(code) > 0 && code[0] == '"' {
		_ = json.Unmarshal(code, &pe.Code)
	}
	details := bytes.TrimSpace(e.Details)
	switch {
	case len(details) > 0 && details[0] == '{':
		var d struct {
			ErrorCode string `json:"error_code"`
		}
		if json.Unmarshal(details, &d) == nil {
			pe.ErrorCode = d.ErrorCode
		}
	case len(details) > 0 && details[0] == '[':
		var ds []detailJSON
		if json.Unmarshal(details, &ds) == nil {
			for _, d := range ds {
				switch {
				case strings.HasSuffix(d.Type, "google.rpc.RetryInfo"):
					pe.RetryDelay, pe.HasRetryDelay = parseProtoDuration(d.RetryDelay)
				case strings.HasSuffix(d.Type, "google.rpc.QuotaFailure"):
					for _, v := range d.Violations {
						pe.QuotaIDs = append(pe.QuotaIDs, v.QuotaID)
					}
				}
			}
		}
	}
	return pe, true
}

// parseProtoDuration reads a google.protobuf.Duration in its JSON form
// ("53s", "1.5s"), bounded by header.MaxHint.
func parseProtoDuration(s string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "s")
	if !ok {
		return 0, false
	}
	return header.Seconds(num)
}

// parseSecondsJSON reads a JSON number or numeric string of seconds.
func parseSecondsJSON(raw json.RawMessage) (time.Duration, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0, false
	}
	s := string(raw)
	if raw[0] == '"' {
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
	}
	return header.Seconds(s)
}

// kind returns what the body alone says about the failure, or false if it
// says nothing the status does not. status is used only to read the
// providers' wording (an Anthropic 400 that means "no credit").
func (pe *providerError) kind(status int) (Kind, bool) {
	msg := strings.ToLower(pe.Message)
	switch {
	case quotaCodes[pe.Code] || quotaCodes[pe.Type],
		pe.ErrorCode == "enforced_spend_limit_reached",
		strings.Contains(msg, "credit balance is too low"),
		strings.Contains(msg, "spend limit"),
		pe.Status == "RESOURCE_EXHAUSTED" && pe.dailyQuota():
		return KindQuotaExhausted, true
	case pe.Code == "context_length_exceeded", pe.Type == "request_too_large",
		strings.Contains(msg, "prompt is too long"),
		strings.Contains(msg, "maximum context length"),
		strings.Contains(msg, "input token count") && strings.Contains(msg, "exceeds"):
		return KindContextOverflow, true
	case pe.Type == "overloaded_error",
		(status == http.StatusServiceUnavailable || status == 529) && strings.Contains(msg, "overloaded"):
		return KindOverloaded, true
	case pe.Code == "rate_limit_exceeded", pe.Type == "rate_limit_error", pe.Status == "RESOURCE_EXHAUSTED":
		return KindRateLimited, true
	case permanentCodes[pe.Code] || permanentCodes[pe.Type] || permanentCodes[pe.Status]:
		return KindPermanent, true
	}
	return 0, false
}

// dailyQuota reports whether a Gemini RESOURCE_EXHAUSTED names a per-day
// quota: it will not come back in seconds, so it is quota exhaustion, not
// a rate limit.
func (pe *providerError) dailyQuota() bool {
	for _, id := range pe.QuotaIDs {
		if strings.Contains(id, "PerDay") {
			return true
		}
	}
	return false
}

// ClassifyResponse judges a failed HTTP response by its status, headers and
// the start of its body, which may be in OpenAI's, Anthropic's or Gemini's
// error shape.
//
// The status gives a first answer: 408, 409, 425, 5xx and unknown
// statuses are transient, 429 rate-limited, 529 overloaded, 402 quota
// exhausted, 413 context overflow, other 4xx permanent. A body that says the
// quota is exhausted, the context overflowed, the provider is overloaded or
// the caller is rate-limited overrides it: an OpenAI 429 insufficient_quota
// is not retried, an Anthropic 400 "prompt is too long" is a context
// overflow. "x-should-retry: false" always wins; "true" makes a failure
// transient unless the body says quota exhausted, context overflow or
// permanent. The wait hint comes from retry-after-ms, Retry-After, Gemini's
// RetryInfo.retryDelay, then a body "retry_after", in that order; an
// HTTP-date is measured from the response's Date header, else from now. A
// hint up to a year is a real (long) request to wait; a negative,
// malformed or longer one is ignored. Rate-limit reset headers are never a
// wait hint.
func ClassifyResponse(status int, h http.Header, body []byte) Verdict {
	v := Verdict{Kind: statusKind(status)}
	pe, parsed := parseProviderError(body)
	bodyKind, bodySays := pe.kind(status)
	if bodySays && bodyKind != KindPermanent {
		v.Kind = bodyKind
	}
	switch strings.ToLower(strings.TrimSpace(h.Get("X-Should-Retry"))) {
	case "false":
		return Verdict{Kind: KindPermanent}
	case "true":
		// The server's yes lifts a status that would not be retried, but
		// not a body that says the failure cannot succeed; it never makes
		// a failure less retryable.
		bodyForbids := bodySays && (bodyKind == KindPermanent || bodyKind == KindQuotaExhausted || bodyKind == KindContextOverflow)
		if !v.Kind.retryable() && !bodyForbids {
			v.Kind = KindTransient
		}
	}
	v.ServerWait, v.HasServerWait = header.Wait(h, time.Now)
	if !v.HasServerWait && parsed {
		switch {
		case pe.HasRetryDelay:
			v.ServerWait, v.HasServerWait = pe.RetryDelay, true
		case pe.HasRetryAfter:
			v.ServerWait, v.HasServerWait = pe.RetryAfter, true
		}
	}
	return v
}

// statusKind is the verdict of a status alone.
func statusKind(status int) Kind {
	switch {
	case status == http.StatusTooManyRequests:
		return KindRateLimited
	case status == 529:
		return KindOverloaded
	case status == http.StatusPaymentRequired:
		return KindQuotaExhausted
	case status == http.StatusRequestEntityTooLarge:
		return KindContextOverflow
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooEarly:
		return KindTransient
	case status >= 400 && status < 500:
		return KindPermanent
	}
	return KindTransient
}

// ErrorCode returns what an OpenAI, Anthropic or Gemini error body in err
// (an *HTTPError or a *StreamError, wrapped or not) says: the error's type
// (OpenAI's and Anthropic's type, Gemini's status) and code (OpenAI's
// code, Anthropic's details.error_code). Both are empty when err carries
// no such body. Logs and metrics use them to tell a 400
// context_length_exceeded from a 400 invalid_value; each is at most 64
// bytes, with any control characters dropped.
func ErrorCode(err error) (errType, code string) {
	var body []byte
	for e := err; e != nil; {
		switch x := e.(type) {
		case *HTTPError:
			body = x.Body
		case *StreamError:
			body = x.Data
		}
		if body != nil {
			break
		}
		u, ok := e.(interface{ Unwrap() error })
		if !ok {
			break
		}
		e = u.Unwrap()
	}
	pe, ok := parseProviderError(body)
	if !ok {
		return "", ""
	}
	errType, code = pe.Type, pe.Code
	if errType == "" {
		errType = pe.Status
	}
	if code == "" {
		code = pe.ErrorCode
	}
	return identifier(errType), identifier(code)
}

// maxIdentifier bounds an error type or code that ErrorCode returns.
const maxIdentifier = 64

// identifier is s fit to log as an error type or code: at most
// maxIdentifier bytes, cut on a rune boundary, with no control characters.
// A provider's type is a short word; a hostile one could send 60 KB of
// terminal escapes, and every log record would carry them.
func identifier(s string) string {
	if len(s) > maxIdentifier {
		n := maxIdentifier
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		s = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return -1
			}
			return r
		}, s)
	}
	return s
}
