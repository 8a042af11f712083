package rebound

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/header"
	"github.com/rebound-go/rebound/internal/provider"
)

// Kind is what sort of failure an attempt met, and so what may be done
// about it.
type Kind uint8

// Kinds of failure. The zero value is KindTransient: an error nobody
// recognises is retried, as in every peer library.
const (
	// KindTransient may succeed if tried again: 5xx, 408, 409, 425,
	// connection resets, per-attempt timeouts, unknown errors.
	KindTransient Kind = iota
	// KindRateLimited is a 429 that asks the caller to slow down.
	KindRateLimited
	// KindOverloaded is a provider saying it is overloaded (529).
	KindOverloaded
	// KindQuotaExhausted is an exhausted quota or balance: retrying
	// cannot succeed until someone pays.
	KindQuotaExhausted
	// KindContextOverflow is a request too large for the model: it can
	// only succeed once the request is made smaller (413, and providers'
	// context-length errors).
	KindContextOverflow
	// KindPermanent will fail the same way however often it is tried:
	// 400, 401, 403, 404, 422.
	KindPermanent
	// KindCanceled is the caller's own context, canceled or past its
	// deadline.
	KindCanceled
)

var kindNames = [...]string{
	KindTransient: "transient", KindRateLimited: "rate_limited", KindOverloaded: "overloaded",
	KindQuotaExhausted: "quota_exhausted", KindContextOverflow: "context_overflow",
	KindPermanent: "permanent", KindCanceled: "canceled",
}

// String returns the JSON name of k.
func (k Kind) String() string { return enumString(kindNames[:], int(k), "kind") }

// MarshalText implements encoding.TextMarshaler.
func (k Kind) MarshalText() ([]byte, error) { return enumMarshal(kindNames[:], int(k), "kind") }

// UnmarshalText implements encoding.TextUnmarshaler.
func (k *Kind) UnmarshalText(b []byte) error {
	i, err := enumParse(kindNames[:], string(b), "kind")
	*k = Kind(i)
	return err
}

// retryable reports whether a failure of kind k may be retried on the same
// target.
func (k Kind) retryable() bool { return k <= KindOverloaded }

// Verdict is a classifier's judgement of one failed attempt.
type Verdict struct {
	Kind Kind
	// ServerWait is how long the server asked the caller to wait before
	// trying again; meaningful only when HasServerWait is set (a server
	// may ask for zero).
	ServerWait    time.Duration
	HasServerWait bool
}

// permanentError marks an error that must not be retried. See Permanent.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }

func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as not worth retrying, whatever the classifier would
// say. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// retryableError marks an error as transient. See Retryable.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }

func (e *retryableError) Unwrap() error { return e.err }

// Retryable marks err as transient, whatever the classifier would say. A
// function returns it to reject a result it cannot use (an empty model
// response, say) and have the call tried again. Retryable(nil) is nil.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &retryableError{err: err}
}

// A Rule classifies the failed responses it matches, before the built-in
// rules do: the way to teach rebound a provider whose per-minute limit
// reads like an exhausted quota, or a gateway's own error. A response
// matches when every matcher set in the rule matches it; a rule must set
// at least one. The first rule of Policy.Rules that matches decides.
//
// Rules judge HTTP failures (an *HTTPError, as Transport and NewHTTPError
// make) and error events in a stream (a *StreamError, which has no status
// or headers); Do's other errors pass them by.
type Rule struct {
	// Status matches the response's HTTP status; zero matches any.
	Status int
	// Header matches a response that has this header. HeaderContains,
	// if set, must be in its value; both are compared ignoring case.
	Header, HeaderContains string
	// Type matches the error's type, ignoring case: OpenAI's and
	// Anthropic's type, Gemini's status, Bedrock's x-amzn-ErrorType, TGI's
	// error_type (what ErrorCode returns first).
	Type string
	// Code matches the error's code, ignoring case: OpenAI's code,
	// Anthropic's details.error_code, Azure's innererror code (what
	// ErrorCode returns second).
	Code string
	// Message matches a response whose error message contains it,
	// ignoring case; a body in no known shape is matched whole.
	Message string

	// Kind is the verdict on a matching response. The zero value is
	// KindTransient; KindCanceled cannot be given. A server's
	// "x-should-retry: false" still wins over a kind that would be
	// retried: the verdict is then KindPermanent.
	Kind Kind
	// Wait is the verdict's wait when the response asks for none of its
	// own, taken as a server's wait hint (it counts against WaitBudget and
	// MaxServerWait). Zero means none (computed backoff); NoDelay means
	// retry at once.
	Wait time.Duration
}

// match reports whether r matches a response whose error pe says.
func (r *Rule) match(status int, h http.Header, body []byte, pe *provider.Error, parsed bool) bool {
	if r.Status != 0 && r.Status != status {
		return false
	}
	if r.Header != "" {
		values := h.Values(r.Header)
		if len(values) == 0 || !slices.ContainsFunc(values, func(v string) bool { return containsFold(v, r.HeaderContains) }) {
			return false
		}
	}
	if r.Type != "" && !strings.EqualFold(r.Type, pe.Type) && !strings.EqualFold(r.Type, pe.Status) {
		return false
	}
	if r.Code != "" && !strings.EqualFold(r.Code, pe.Code) && !strings.EqualFold(r.Code, pe.ErrorCode) && !strings.EqualFold(r.Code, pe.InnerCode) {
		return false
	}
	if r.Message != "" {
		msg := pe.Message
		if !parsed || msg == "" {
			msg = string(body)
		}
		if !containsFold(msg, r.Message) {
			return false
		}
	}
	return true
}

// applyRules is the verdict of the first of rules that matches a response
// whose error pe says: its kind, and the response's own wait or else the
// rule's.
func applyRules(rules []Rule, status int, h http.Header, body []byte, pe *provider.Error, parsed bool, now func() time.Time) (Verdict, bool) {
	for i := range rules {
		r := &rules[i]
		if !r.match(status, h, body, pe, parsed) {
			continue
		}
		v := Verdict{Kind: r.Kind}
		if v.Kind.retryable() && strings.EqualFold(strings.TrimSpace(h.Get("X-Should-Retry")), "false") {
			return Verdict{Kind: KindPermanent}, true
		}
		v.ServerWait, v.HasServerWait = responseWait(status, h, pe, parsed, now)
		if !v.HasServerWait && r.Wait != 0 {
			v.ServerWait, v.HasServerWait = max(r.Wait, 0), true // NoDelay: at once
		}
		return v, true
	}
	return Verdict{}, false
}

// containsFold reports whether s contains substr, ignoring case.
func containsFold(s, substr string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(substr))
}

// validate reports the first thing wrong with the rule at key.
func (r *Rule) validate(key string) error {
	switch {
	case r.HeaderContains != "" && r.Header == "":
		return policyErr(key+".header_contains", "needs header, the name of the header to look in")
	case r.Status == 0 && r.Header == "" && r.Type == "" && r.Code == "" && r.Message == "":
		return policyErr(key, "matches every failure; set at least one of status, header, type, code, message")
	case r.Status != 0 && (r.Status < 100 || r.Status > 599):
		return policyErr(key+".status", "want an HTTP status from 100 to 599, got %d", r.Status)
	case r.Header != "" && strings.ContainsFunc(r.Header, func(c rune) bool { return !isTokenChar(c) }):
		return policyErr(key+".header", "%s is not a header name", quote(r.Header))
	case int(r.Kind) >= len(kindNames):
		return policyErr(key+".kind", "unknown value %d", r.Kind)
	case r.Kind == KindCanceled:
		return policyErr(key+".kind", "canceled is the caller's own doing; a response cannot be")
	case r.Wait < 0 && r.Wait != NoDelay:
		return policyErr(key+".wait_ms", "must not be negative (got %v)", r.Wait)
	case r.Wait > header.MaxHint:
		return policyErr(key+".wait_ms", "%v is longer than a year", r.Wait)
	}
	return nil
}

// isTokenChar reports whether c may be in a header name (RFC 9110's
// token).
func isTokenChar(c rune) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)
}

// ruleKey names rule i in errors, as a JSON path.
func ruleKey(i int) string { return "rules[" + strconv.Itoa(i) + "]" }

// responseWait is the wait a failed response asks for, in the order
// ClassifyResponse gives.
func responseWait(status int, h http.Header, pe *provider.Error, parsed bool, now func() time.Time) (time.Duration, bool) {
	if d, ok := header.Wait(h, now); ok {
		return d, true
	}
	if parsed {
		if d, ok := pe.Wait(); ok {
			return d, true
		}
	}
	if status == http.StatusTooManyRequests && h != nil {
		return header.ExhaustedReset(h, now())
	}
	return 0, false
}
