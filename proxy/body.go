package proxy

import (
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/rebound-go/rebound/internal/frontdoor"
	"github.com/rebound-go/rebound/internal/provider"
)

// MaxModel is the longest model name the proxy takes, in bytes: a name
// becomes a breaker's key, a metric's label and a field of the access
// log, and the client chooses it.
const MaxModel = 256

// BodyStall is how long a request body may send nothing before the proxy
// gives up on it (408), as the server gives up on headers that stall:
// frontdoor.BodyStall, the limit of every server of rebound's. A body
// that stalls is given up after BodyStall to 1.1 BodyStall of silence,
// never sooner.
const BodyStall = frontdoor.BodyStall

var errTooLarge = errors.New("request body too large")

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
