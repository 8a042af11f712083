package rebound

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rebound-go/rebound/internal/scrub"
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

// HTTPError is an HTTP response that failed. Functions given to Do return
// one (see NewHTTPError) so that Classify can read its status and headers.
type HTTPError struct {
	StatusCode int
	Header     http.Header
	// Body is the start of the response body, at most MaxErrorBody bytes.
	Body []byte
}

// MaxErrorBody bounds how much of a failed response's body NewHTTPError
// keeps.
const MaxErrorBody = 64 << 10

// NewHTTPError reads at most MaxErrorBody bytes of resp's body, for at
// most 5 seconds, closes it, and returns the failure as an *HTTPError. A
// gzip or deflate body (a request that set Accept-Encoding itself gets one)
// is decoded. The credentials of resp.Request (its credential headers and
// "key" query parameter) are scrubbed from the error's body and headers, in
// case the server echoed them.
func NewHTTPError(resp *http.Response) *HTTPError {
	b := readErrorBody(resp, defaultErrorBodyTimeout)
	if resp.Body != nil {
		resp.Body.Close()
	}
	return httpError(resp, b, scrub.Of(resp.Request))
}

// errorSnippet bounds how much of the body an error message shows.
const errorSnippet = 200

// snippet is the start of an error body for a message: on one line,
// scrubbed of anything shaped like a credential, at most errorSnippet
// bytes. Only as much of the body is read as the message can show, and a
// little more, so that a key straddling the cut is still seen whole.
func snippet(body []byte) string {
	const enough = errorSnippet + 128
	var b strings.Builder
	space, more := false, false
	for i := 0; i < len(body); {
		if b.Len() >= enough || i >= 16*enough { // a body of spaces says no more
			more = true
			break
		}
		r, size := utf8.DecodeRune(body[i:])
		i += size
		if unicode.IsSpace(r) {
			space = b.Len() > 0
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	cut, whole := (scrub.Secrets{}).Cut(b.String(), errorSnippet)
	if more || !whole {
		cut += "…"
	}
	return cut
}

func (e *HTTPError) Error() string {
	msg := fmt.Sprintf("http %d", e.StatusCode)
	if text := http.StatusText(e.StatusCode); text != "" {
		msg += " " + text
	}
	if body := snippet(e.Body); body != "" {
		msg += ": " + body
	}
	return msg
}

// Classify is the default classifier. It knows the Permanent and Retryable
// marks, context errors, HTTP failures (through *HTTPError,
// judged by ClassifyResponse: status, headers, and OpenAI, Anthropic and
// Gemini error bodies), and network errors. Anything else is transient.
// Along a chain of wrapped errors the outermost one it knows decides.
//
// A connection that broke or timed out may work next time; a certificate
// that does not verify, a host that does not exist or a URL that cannot be
// sent will not. context.DeadlineExceeded is transient because, when the
// caller's own context is still live, it can only come from a per-attempt
// timeout; Do checks the caller's context before asking the classifier.
func Classify(err error) Verdict { return classify(err, time.Now) }

// classify is Classify by the clock now, read only for an HTTP-date wait
// hint without a Date header.
func classify(err error, now func() time.Time) Verdict {
	if v, ok := classifyChain(err, now); ok {
		return v
	}
	return Verdict{Kind: KindTransient}
}

// classifyChain walks err's tree as errors.Is does, without errors.As's
// allocations: Classify sits on every retry's path.
func classifyChain(err error, now func() time.Time) (Verdict, bool) {
	for err != nil {
		if v, ok := classifyOne(err, now); ok {
			return v, true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if v, ok := classifyChain(e, now); ok {
					return v, true
				}
			}
			return Verdict{}, false
		default:
			return Verdict{}, false
		}
	}
	return Verdict{}, false
}

func classifyOne(err error, now func() time.Time) (Verdict, bool) {
	switch e := err.(type) {
	case *permanentError:
		return Verdict{Kind: KindPermanent}, true
	case *retryableError:
		return Verdict{Kind: KindTransient}, true
	case *HTTPError:
		return classifyResponse(e.StatusCode, e.Header, e.Body, now), true
	case *StreamError:
		return classifyResponse(0, nil, e.Data, now), true
	case *tls.CertificateVerificationError, x509.UnknownAuthorityError, x509.HostnameError,
		x509.CertificateInvalidError:
		return Verdict{Kind: KindPermanent}, true
	case *net.DNSError:
		if e.IsNotFound {
			return Verdict{Kind: KindPermanent}, true
		}
	case *url.Error:
		if e.Err != nil && strings.HasPrefix(e.Err.Error(), "unsupported protocol scheme") {
			return Verdict{Kind: KindPermanent}, true
		}
	case syscall.Errno:
		if e == syscall.ECONNRESET || e == syscall.ECONNREFUSED {
			return Verdict{Kind: KindTransient}, true
		}
	}
	switch err {
	case context.Canceled:
		return Verdict{Kind: KindCanceled}, true
	case context.DeadlineExceeded, io.ErrUnexpectedEOF, io.EOF:
		return Verdict{Kind: KindTransient}, true
	}
	return Verdict{}, false
}
