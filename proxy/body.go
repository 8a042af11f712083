package proxy

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/provider"
)

// MaxModel is the longest model name the proxy takes, in bytes: a name
// becomes a breaker's key, a metric's label and a field of the access
// log, and the client chooses it.
const MaxModel = 256

// BodyStall is how long a request body may send nothing before the proxy
// gives up on it (408), as the server gives up on headers that stall. The
// connection's read deadline is moved on at most every bodyStallSlack
// (each move is a timer's change, and a body comes in many reads), to
// BodyStall and bodyStallSlack from then: a body that stalls is given up
// after BodyStall to BodyStall+bodyStallSlack of silence, never sooner.
const BodyStall = 10 * time.Second

// bodyStallSlack is how much later than BodyStall a stalled body may be
// given up, so that its deadline need not move at every read.
const bodyStallSlack = BodyStall / 10

var errTooLarge = errors.New("request body too large")

// deadlineReader reads a request body with the connection's read
// deadline moved on as it comes, up to end.
type deadlineReader struct {
	r           io.Reader
	rc          *http.ResponseController
	end         time.Time
	left        int64     // of the declared length; -1 when none was
	pushedAt    time.Time // when the deadline was last moved; zero if never
	unsupported bool      // rc cannot set a deadline: no use asking again
}

func (d *deadlineReader) Read(b []byte) (int, error) {
	// The read that finds the end of a declared length waits for nothing.
	if d.left != 0 && (d.pushedAt.IsZero() || time.Since(d.pushedAt) >= bodyStallSlack) {
		d.push()
	}
	n, err := d.r.Read(b)
	if d.left > 0 {
		d.left = max(d.left-int64(n), 0)
	}
	return n, err
}

// push sets the read deadline BodyStall and bodyStallSlack from now, or
// at the end.
func (d *deadlineReader) push() {
	if d.unsupported {
		return
	}
	now := time.Now()
	deadline := now.Add(BodyStall + bodyStallSlack)
	if deadline.After(d.end) {
		deadline = d.end
	}
	if err := d.rc.SetReadDeadline(deadline); errors.Is(err, http.ErrNotSupported) {
		d.unsupported = true
		return
	}
	d.pushedAt = now
}

// clear takes the deadline away, if it was set: the server's own reads
// after the body (the one that watches for the client going) must not
// meet it.
func (d *deadlineReader) clear() {
	if !d.pushedAt.IsZero() {
		d.rc.SetReadDeadline(time.Time{})
	}
}

// geminiCall reports whether path calls a method of a model, as Gemini's
// do (".../models/NAME:generateContent").
func geminiCall(path string) bool {
	_, ok := provider.GeminiMethod(path)
	return ok
}

// geminiStream reports whether path asks Gemini for a stream
// (".../models/NAME:streamGenerateContent"), which comes as a JSON array
// unless the query asks for events.
func geminiStream(path string) bool {
	method, _ := provider.GeminiMethod(path)
	return method == "streamGenerateContent"
}

// writeJSON writes a JSON body with status.
func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body+"\n")
}

// writeError writes an error the proxy answers itself, shaped as dialect's
// errors are, so that the client's SDK reports it as it would the
// provider's.
func writeError(w http.ResponseWriter, dialect string, status int, msg string) {
	q := strconv.Quote(msg)
	typ := errorType(status)
	var body string
	switch dialect {
	case DialectAnthropic:
		body = `{"type":"error","error":{"type":"` + typ + `","message":` + q + `}}`
	case DialectGemini:
		body = `{"error":{"code":` + strconv.Itoa(status) + `,"message":` + q + `,"status":"` + geminiStatus(status) + `"}}`
	default:
		body = `{"error":{"message":` + q + `,"type":"` + typ + `","param":null,"code":null}}`
	}
	writeJSON(w, status, body)
}

func errorType(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusServiceUnavailable:
		return "overloaded_error"
	case http.StatusBadRequest:
		return "invalid_request_error"
	case http.StatusForbidden:
		return "permission_error"
	}
	return "api_error"
}

func geminiStatus(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge, http.StatusBadRequest:
		return "INVALID_ARGUMENT"
	case http.StatusServiceUnavailable:
		return "UNAVAILABLE"
	case http.StatusNotImplemented:
		return "UNIMPLEMENTED"
	case http.StatusForbidden:
		return "PERMISSION_DENIED"
	case http.StatusRequestTimeout:
		return "DEADLINE_EXCEEDED"
	}
	return "INTERNAL"
}
