package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/provider"
)

// MaxModel is the longest model name the proxy takes, in bytes: a name
// becomes a breaker's key, a metric's label and a field of the access
// log, and the client chooses it.
const MaxModel = 256

// BodyStall is how long a request body may send nothing before the proxy
// gives up on it (408), as the server gives up on headers that stall.
const BodyStall = 10 * time.Second

var (
	errTooLarge       = errors.New("request body too large")
	errDuplicateModel = errors.New(`the request body has more than one top-level "model"`)
	errLongModel      = fmt.Errorf("the model name is over %d bytes", MaxModel)
)

// readBody reads r's body, at most limit bytes, within timeout and with
// no stall of BodyStall: a body that does not come holds a connection, a
// goroutine and its bytes so far. rc sets the connection's read deadline
// (a ResponseWriter that cannot has its body read without one).
func readBody(r *http.Request, rc *http.ResponseController, limit int64, timeout time.Duration) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body := &deadlineReader{r: r.Body, rc: rc, end: time.Now().Add(timeout), left: r.ContentLength}
	if r.ContentLength > limit {
		body.push() // for the server, which may read the rest before it answers
		return nil, errTooLarge
	}
	// Read as it comes: a buffer sized by the declared length would let
	// a client that sends only headers make the proxy allocate up to the
	// cap.
	b, err := io.ReadAll(io.LimitReader(body, limit+1))
	switch {
	case err != nil:
		// The deadline stays: the server reads what is left of a body
		// before it answers, and must not wait for this one.
		return nil, err
	case int64(len(b)) > limit:
		return nil, errTooLarge
	}
	if body.pushed {
		rc.SetReadDeadline(time.Time{})
	}
	return b, nil
}

// deadlineReader reads a request body with the connection's read
// deadline pushed on before each read, up to end.
type deadlineReader struct {
	r      io.Reader
	rc     *http.ResponseController
	end    time.Time
	left   int64 // of the declared length; -1 when none was
	pushed bool
}

func (d *deadlineReader) Read(b []byte) (int, error) {
	if d.left != 0 {
		d.push() // the read that finds the end of a declared length waits for nothing
	}
	n, err := d.r.Read(b)
	if d.left > 0 {
		d.left = max(d.left-int64(n), 0)
	}
	return n, err
}

// push sets the read deadline BodyStall from now, or at the end.
func (d *deadlineReader) push() {
	deadline := time.Now().Add(BodyStall)
	if deadline.After(d.end) {
		deadline = d.end
	}
	d.rc.SetReadDeadline(deadline)
	d.pushed = true
}

// modelOf returns the model a request asks for: in a Gemini path
// (".../models/NAME:verb"), or the JSON body's top-level "model"; empty
// when it has none, or is not JSON (it goes to the upstream unchanged all
// the same, whose 400 is the truth). A body with two top-level "model"s
// is an error: the proxy would route by one and the upstream serve the
// other (JSON parsers keep the last), past a route's model.
func modelOf(path string, body []byte) (string, error) {
	m := provider.GeminiModel(path)
	if m == "" {
		start, end, dup := modelSpan(body)
		if dup {
			return "", errDuplicateModel
		}
		if start < 0 || json.Unmarshal(body[start:end], &m) != nil {
			m = ""
		}
	}
	if len(m) > MaxModel {
		return "", errLongModel
	}
	return m, nil
}

// renamePathModel returns path asking for model instead, if it names one.
func renamePathModel(path, model string) string {
	old := provider.GeminiModel(path)
	if old == "" {
		return path
	}
	i := strings.Index(path, "/models/") + len("/models/")
	return path[:i] + model + path[i+len(old):]
}

// renameModel returns body with its top-level "model" set to model, and
// every other byte as it was; a body without one, or not JSON, is
// returned as it is.
func renameModel(body []byte, model string) []byte {
	start, end, _ := modelSpan(body)
	if start < 0 {
		return body
	}
	out := make([]byte, 0, len(body)+len(model))
	out = append(out, body[:start]...)
	out = strconv.AppendQuote(out, model)
	return append(out, body[end:]...)
}

// modelSpan returns where the value of a JSON object's top-level "model"
// key lies in body, or -1, -1; dup reports a second "model" key (escapes
// decoded, as every parser does), which the whole object is read to find.
func modelSpan(body []byte) (start, end int, dup bool) {
	start, end = -1, -1
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return start, end, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return start, end, false // not JSON after all: the upstream will say so
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return start, end, false
		}
		if k == "model" {
			if start >= 0 {
				return -1, -1, true
			}
			end = int(dec.InputOffset())
			start = end - len(v)
		}
	}
	return start, end, false
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
	case http.StatusRequestTimeout:
		return "DEADLINE_EXCEEDED"
	}
	return "INTERNAL"
}
