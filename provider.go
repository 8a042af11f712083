package rebound

import (
	"net/http"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/header"
	"github.com/rebound-go/rebound/internal/provider"
)

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
	return classifyResponse(status, h, body, time.Now)
}

// classifyResponse is ClassifyResponse by the clock now, read only for an
// HTTP-date wait hint without a Date header.
func classifyResponse(status int, h http.Header, body []byte, now func() time.Time) Verdict {
	v := Verdict{Kind: statusKind(status)}
	pe, parsed := provider.Parse(body)
	bodyKind, bodySays := kindOf(pe.Class(status))
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
	v.ServerWait, v.HasServerWait = header.Wait(h, now)
	if !v.HasServerWait && parsed {
		v.ServerWait, v.HasServerWait = pe.Wait()
	}
	return v
}

// kindOf is the Kind of what a body says; false if it says nothing.
func kindOf(c provider.Class) (Kind, bool) {
	switch c {
	case provider.QuotaExhausted:
		return KindQuotaExhausted, true
	case provider.ContextOverflow:
		return KindContextOverflow, true
	case provider.Overloaded:
		return KindOverloaded, true
	case provider.RateLimited:
		return KindRateLimited, true
	case provider.Permanent:
		return KindPermanent, true
	}
	return 0, false
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
// (an *HTTPError or a *StreamError, wrapped or not, as in the error Do
// returns) says: the error's type
// (OpenAI's and Anthropic's type, Gemini's status) and code (OpenAI's
// code, Anthropic's details.error_code). Both are empty when err carries
// no such body. Logs and metrics use them to tell a 400
// context_length_exceeded from a 400 invalid_value; each is at most 64
// bytes, with any control characters dropped.
func ErrorCode(err error) (errType, code string) {
	pe, ok := provider.Parse(providerBody(err))
	if !ok {
		return "", ""
	}
	return pe.Identifiers()
}

// providerBody returns the body of the first *HTTPError or *StreamError in
// err's tree, walked as errors.As walks it (a *GiveUpError wraps several).
func providerBody(err error) []byte {
	switch x := err.(type) {
	case nil:
		return nil
	case *HTTPError:
		return x.Body
	case *StreamError:
		return x.Data
	case interface{ Unwrap() error }:
		return providerBody(x.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range x.Unwrap() {
			if body := providerBody(e); body != nil {
				return body
			}
		}
	}
	return nil
}
