// Package provider reads the error bodies of the LLM providers, so that
// rebound's default classifier knows their errors with no configuration: a
// Transport pointed at any of them, at a proxy in front of them, or at a
// test server that speaks their dialect just works. The shapes:
//
//	OpenAI     {"error": {"message", "type", "param", "code"}}
//	Anthropic  {"type": "error", "error": {"type", "message", "details": {"error_code"}}}
//	Gemini     {"error": {"code", "message", "status", "details": [{"@type", ...}]}}
//
// What a body says is a Class; the root package turns it into a Kind.
package provider

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

// Error is what an error body says, in the union of the providers'
// shapes.
type Error struct {
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

// Parse reads an error body in any of the providers' shapes. It reports
// false for a body that is not JSON or has no error in it.
func Parse(body []byte) (Error, bool) {
	var pe Error
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

// Class is what an error body alone says about a failure.
type Class uint8

// Classes.
const (
	// Unclassified: the body says nothing the status does not.
	Unclassified Class = iota
	QuotaExhausted
	ContextOverflow
	Overloaded
	RateLimited
	Permanent
)

// Class returns what the body says about the failure. status is used only
// to read the providers' wording (a 503 that says "overloaded").
func (pe *Error) Class(status int) Class {
	msg := strings.ToLower(pe.Message)
	switch {
	case quotaCodes[pe.Code] || quotaCodes[pe.Type],
		pe.ErrorCode == "enforced_spend_limit_reached",
		strings.Contains(msg, "credit balance is too low"),
		strings.Contains(msg, "spend limit"),
		pe.Status == "RESOURCE_EXHAUSTED" && pe.dailyQuota():
		return QuotaExhausted
	case pe.Code == "context_length_exceeded", pe.Type == "request_too_large",
		strings.Contains(msg, "prompt is too long"),
		strings.Contains(msg, "maximum context length"),
		strings.Contains(msg, "input token count") && strings.Contains(msg, "exceeds"):
		return ContextOverflow
	case pe.Type == "overloaded_error",
		(status == http.StatusServiceUnavailable || status == 529) && strings.Contains(msg, "overloaded"):
		return Overloaded
	case pe.Code == "rate_limit_exceeded", pe.Type == "rate_limit_error", pe.Status == "RESOURCE_EXHAUSTED":
		return RateLimited
	case permanentCodes[pe.Code] || permanentCodes[pe.Type] || permanentCodes[pe.Status]:
		return Permanent
	}
	return Unclassified
}

// Wait returns the wait the body asks for: Gemini's RetryInfo.retryDelay,
// else a top-level "retry_after".
func (pe *Error) Wait() (time.Duration, bool) {
	switch {
	case pe.HasRetryDelay:
		return pe.RetryDelay, true
	case pe.HasRetryAfter:
		return pe.RetryAfter, true
	}
	return 0, false
}

// Identifiers returns the error's type (OpenAI's and Anthropic's type,
// Gemini's status) and code (OpenAI's code, Anthropic's
// details.error_code), each fit to log: see Identifier.
func (pe *Error) Identifiers() (errType, code string) {
	errType, code = pe.Type, pe.Code
	if errType == "" {
		errType = pe.Status
	}
	if code == "" {
		code = pe.ErrorCode
	}
	return Identifier(errType), Identifier(code)
}

// dailyQuota reports whether a Gemini RESOURCE_EXHAUSTED names a per-day
// quota: it will not come back in seconds, so it is quota exhaustion, not
// a rate limit.
func (pe *Error) dailyQuota() bool {
	for _, id := range pe.QuotaIDs {
		if strings.Contains(id, "PerDay") {
			return true
		}
	}
	return false
}

// maxIdentifier bounds an error type or code fit to log.
const maxIdentifier = 64

// Identifier is s fit to log as an error type or code: at most
// maxIdentifier bytes, cut on a rune boundary, with no control characters.
// A provider's type is a short word; a hostile one could send 60 KB of
// terminal escapes, and every log record would carry them.
func Identifier(s string) string {
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
