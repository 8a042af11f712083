package rebound

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rebound-go/rebound/internal/relay"
	"github.com/rebound-go/rebound/internal/scrub"
	"github.com/rebound-go/rebound/internal/sse"
)

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
	b := relay.ReadErrorBody(resp, MaxErrorBody, defaultErrorBodyTimeout)
	if resp.Body != nil {
		resp.Body.Close()
	}
	return httpError(resp, b, scrub.Of(resp.Request))
}

// defaultErrorBodyTimeout bounds how long a failed response's body is read
// to judge it, unless a Transport says otherwise.
const defaultErrorBodyTimeout = 5 * time.Second

// httpError makes the *HTTPError of a failed response whose body b was
// read, with the credentials of its request scrubbed from the body and
// from the headers a server echoed them in. The response's own header is
// left as it was.
func httpError(resp *http.Response, b relay.ErrorBody, secrets scrub.Secrets) *HTTPError {
	h := resp.Header
	if b.Decoded {
		h = h.Clone()
		h.Del("Content-Encoding")
		h.Del("Content-Length")
	}
	return &HTTPError{StatusCode: resp.StatusCode, Header: secrets.Header(h), Body: secrets.CutBytes(b.Text, MaxErrorBody)}
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

// StreamError is an error event inside an event stream that answered 200:
// OpenAI's {"error": …} chunk, Anthropic's "event: error" (an
// overloaded_error, say), Gemini's error chunk. Classify judges its data as
// it would an error body.
type StreamError struct {
	// Event is the event's name ("error"), if it had one.
	Event string
	// Data is the event's data, at most MaxErrorBody bytes.
	Data []byte
}

func (e *StreamError) Error() string {
	return "rebound: error event in stream: " + snippet(e.Data)
}

// streamError is the *StreamError of an error event named name, its data
// scrubbed of secrets and cut to MaxErrorBody.
func streamError(name string, data []byte, secrets scrub.Secrets) error {
	return &StreamError{Event: name, Data: secrets.CutBytes(data, MaxErrorBody)}
}

// StopReason is why a call stopped retrying.
type StopReason uint8

// Reasons to stop.
const (
	// StopAttempts: the attempts allowed for the failure's kind are spent.
	StopAttempts StopReason = iota + 1
	// StopWaitBudget: the next wait would overrun the wait budget.
	StopWaitBudget
	// StopDeadline: the next wait would reach the caller's deadline.
	StopDeadline
	// StopNotRetryable: the failure's kind is never retried (permanent,
	// quota exhausted, context overflow).
	StopNotRetryable
	// StopCanceled: the caller's context was canceled or its deadline
	// passed.
	StopCanceled
	// StopServerWait: the server asked for a wait beyond MaxServerWait
	// and the policy honours hints.
	StopServerWait
	// StopSideEffects: the call has side effects and is attempted once.
	StopSideEffects
	// StopInvalidPolicy: the policy fails Validate (reported by Do, never
	// by a Loop).
	StopInvalidPolicy
	// StopUnreplayableBody: the request's body could be sent only once
	// (Transport).
	StopUnreplayableBody
	// StopBreakerOpen: the Policy's Breaker refused an attempt.
	StopBreakerOpen
	// StopRetryBudget: the retry budget shared with other calls is spent.
	StopRetryBudget
	// StopRefused: the context's Guard refused an attempt before it was
	// sent (a spend cap it would pass, say).
	StopRefused
)

var stopNames = [...]string{
	StopAttempts: "attempts exhausted", StopWaitBudget: "wait budget exhausted",
	StopDeadline: "deadline too near", StopNotRetryable: "not retryable", StopCanceled: "canceled",
	StopServerWait: "server wait too long", StopSideEffects: "side effects, not retried",
	StopInvalidPolicy: "invalid policy", StopUnreplayableBody: "request body cannot be replayed",
	StopBreakerOpen: "breaker open", StopRetryBudget: "retry budget exhausted", StopRefused: "refused by the guard",
}

func (r StopReason) String() string {
	if r == 0 {
		return "not stopped"
	}
	return enumString(stopNames[:], int(r), "stop")
}

// GiveUpError is the error of a call that stopped without success. It wraps
// the last attempt's error, so errors.Is and errors.As reach it.
type GiveUpError struct {
	// Attempts is how many attempts were made.
	Attempts int
	// Reason is why the loop stopped.
	Reason StopReason
	// Verdict is the classifier's verdict on the last error.
	Verdict Verdict
	// Waited is the total time spent waiting between attempts.
	Waited time.Duration
	// ServerWait is the wait the server asked for last, if HasServerWait;
	// with Reason StopServerWait, the wait that was judged too long.
	ServerWait    time.Duration
	HasServerWait bool
	// Err is the last attempt's error.
	Err error

	cause error // the context's cause, the *PolicyError or the breaker's refusal that stopped the call
}

func (e *GiveUpError) Error() string {
	s := "attempts"
	if e.Attempts == 1 {
		s = "attempt"
	}
	why := e.Reason.String()
	switch e.Reason {
	case StopNotRetryable:
		why = e.Verdict.Kind.String() + " error, " + why
	case StopInvalidPolicy, StopBreakerOpen, StopRefused:
		if e.cause != nil {
			why += ": " + e.cause.Error()
		}
	case StopServerWait, StopWaitBudget, StopDeadline:
		if e.HasServerWait {
			why += fmt.Sprintf(", server asked to wait %v", e.ServerWait)
		}
	}
	return fmt.Sprintf("rebound: gave up after %d %s (%s): %v", e.Attempts, s, why, e.Err)
}

// Unwrap returns the last attempt's error and, when the caller's context
// stopped the call, the context's cause; when the policy was invalid, the
// *PolicyError; when a breaker or a Guard refused a retry, its refusal. A
// call refused before its first attempt has only the refusal.
func (e *GiveUpError) Unwrap() []error {
	if e.cause != nil {
		return []error{e.Err, e.cause}
	}
	return []error{e.Err}
}

// IncompleteReason says how an event stream handed to the caller ended
// before its end marker.
type IncompleteReason uint8

const (
	// IncompleteCut: the stream broke (a read error) mid-answer.
	IncompleteCut IncompleteReason = iota + 1
	// IncompleteStalled: the stream sent nothing for Transport.StreamStall
	// and was closed.
	IncompleteStalled
	// IncompleteTooSlow: the stream sent fewer content events than
	// Transport.StreamMinRate over a StreamRateWindow and was closed.
	IncompleteTooSlow
	// IncompleteNoEnd: the stream ended cleanly without its end marker.
	IncompleteNoEnd
	// IncompleteErrorEvent: the stream ended on an in-band error
	// (an error event, OpenAI's response.failed or response.incomplete).
	IncompleteErrorEvent
	// IncompleteNotText: the stream was cut and its continuation
	// (see Transport.Continuations) answered with something other than
	// text (a tool call, a thinking block, an end that names a tool
	// call), which was not handed on.
	IncompleteNotText
)

var incompleteNames = [...]string{"", "cut", "stalled", "too slow", "ended without its end marker", "error event", "continued with other than text"}

func (r IncompleteReason) String() string {
	if int(r) < len(incompleteNames) && r > 0 {
		return incompleteNames[r]
	}
	return fmt.Sprintf("IncompleteReason(%d)", r)
}

// IncompleteStreamError is how a stream handed to the caller ends when its
// answer is not whole: Read returns it in place of io.EOF or the bare read
// error, after every complete event that came, so that a half answer is
// never mistaken for a whole one. Transport returns it for streams whose
// dialect it recognises; StreamUntil for streams with a Done event.
type IncompleteStreamError struct {
	// Reason is how the stream ended.
	Reason IncompleteReason
	// Events is how many content events reached the caller.
	Events int
	// Text is how many bytes of text they carried.
	Text int
	// Err is the read error that broke the stream, if one did.
	Err error
}

func (e *IncompleteStreamError) Error() string {
	msg := fmt.Sprintf("rebound: event stream incomplete (%v) after %d content events, %d bytes of text", e.Reason, e.Events, e.Text)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the read error that broke the stream, if any.
func (e *IncompleteStreamError) Unwrap() error { return e.Err }

// The causes with which rebound ends an attempt's context, and the
// failures they leave: a hedge's loser, and a stream silent too long.
var (
	// ErrHedgeLost is the cause of the cancellation of a hedged attempt
	// that lost the race: the other produced content first.
	ErrHedgeLost = errors.New("rebound: another attempt of the hedged call answered first")

	// ErrStreamStalled is the failure of an event stream that went silent
	// for too long before any content: the Transport's StreamLookahead,
	// or StreamOptions.Stall (the attempt's context then ends with it).
	// It is transient.
	ErrStreamStalled = errors.New("rebound: event stream went silent before any content")
)

// errStreamEnded is the failure of an event stream that ended before any
// content: the provider gave up mid-answer.
var errStreamEnded = fmt.Errorf("rebound: event stream ended before any content: %w", io.ErrUnexpectedEOF)

// redactError returns err with the request's credentials scrubbed from
// its message (a base transport may put the URL, key and all, in it);
// errors.Is and errors.As still reach err.
func redactError(err error, secrets scrub.Secrets) error {
	msg := err.Error()
	if scrubbed := secrets.String(msg); scrubbed != msg {
		return &redactedError{msg: scrubbed, err: err}
	}
	return err
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }

func (e *redactedError) Unwrap() error { return e.err }

// errFirstToken is the failure of an event stream whose first content
// event took longer than the Transport's first-token bound. It is a stall,
// and transient.
var errFirstToken = fmt.Errorf("rebound: no content within the first-token timeout: %w", ErrStreamStalled)

// lookFailure is the failure of a stream that failed before any content,
// in rebound's terms: a *StreamError, errStreamEnded, a stall, or the read
// error, with the request's secrets scrubbed out of it.
func lookFailure(err error, secrets scrub.Secrets) error {
	var ev *sse.ErrorEvent
	switch {
	case err == relay.ErrSilent:
		return ErrStreamStalled
	case err == relay.ErrLate:
		return errFirstToken
	case err == sse.ErrEnded:
		return errStreamEnded
	case errors.As(err, &ev):
		return streamError(ev.Name, ev.Data, secrets)
	}
	return redactError(err, secrets)
}

// streamErrors makes the errors of a stream handed over: rebound's own.
var streamErrors = relay.Errors{
	Incomplete: func(r relay.Reason, events, text int, err error) error {
		return &IncompleteStreamError{Reason: IncompleteReason(r), Events: events, Text: text, Err: err}
	},
	Reason: func(err error) (relay.Reason, error, bool) {
		var ie *IncompleteStreamError
		if !errors.As(err, &ie) {
			return 0, nil, false
		}
		return relay.Reason(ie.Reason), ie.Err, true
	},
	Event:  streamError,
	Redact: redactError,
}
