package proxy

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

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

var (
	errTooLarge       = errors.New("request body too large")
	errDuplicateModel = errors.New(`the request body has more than one top-level "model" key (written in another case, escaped or cut by a NUL, each counts)`)
	errModelVariant   = errors.New(`the request body's top-level model key is not written "model" (parsers differ on "Model" and the like)`)
	errModelTwice     = errors.New(`the body names another model than the path`)
	errModelNotString = errors.New(`the request body's "model" is not a string`)
	errModelSurrogate = errors.New(`the request body's "model" holds a lone surrogate escape, which parsers read differently`)
	errLongModel      = fmt.Errorf("the model name is over %d bytes", MaxModel)
)

// modelOf returns the model a request asks for, from a Gemini path
// (".../models/NAME:verb") or a JSON body's top-level "model", and notes
// where the body's lies in h, for a fallback to rename it.
//
// A body sent as JSON (sentAsJSON) must be strict JSON (scanStrict) with
// at most one top-level key that any common parser would take for
// "model": written "model" (escapes allowed), holding a string without a
// lone surrogate, and on a Gemini call naming the path's model if any.
// Anything else
// could be read one way by the proxy, which routes by it, and another by
// the upstream, which serves it: it is an error (a 400). A body that is
// not JSON (a file upload's form, a compressed body) has no model here:
// only a route that names none takes it.
func modelOf(path string, header http.Header, h *heldBody) (string, error) {
	m := provider.GeminiModel(path)
	if sentAsJSON(header, h.b) {
		sb, err := scanStrict(h.b)
		switch {
		case err != nil:
			return "", err
		case sb.modelKeys > 1:
			return "", errDuplicateModel
		case sb.variant:
			return "", errModelVariant
		case sb.modelKeys == 1 && !sb.str:
			return "", errModelNotString
		case sb.modelKeys == 1:
			raw := h.b[sb.start+1 : sb.end-1]
			if len(raw) > MaxModel*len(`\uffff`) {
				return "", errLongModel
			}
			text, whole := unescape(make([]byte, 0, len(raw)), raw)
			switch body := string(text); {
			case !whole:
				return "", errModelSurrogate
			case m == "":
				m = body
				h.start, h.end = sb.start, sb.end
			case geminiCall(path) && (body == m || body == "models/"+m):
				h.start, h.end, h.prefix = sb.start, sb.end, strings.TrimSuffix(body, m)
			case geminiCall(path):
				// Gemini's request has a model field the path fills:
				// which one an upstream serves is its own affair.
				return "", errModelTwice
			}
		}
	}
	if len(m) > MaxModel {
		return "", errLongModel
	}
	return m, nil
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

// sentAsJSON reports whether a body is meant as JSON: its Content-Type
// says so, or it begins as an object or an array does. A body with a
// Content-Encoding (gzip) is not read: it is not JSON as it comes.
func sentAsJSON(header http.Header, body []byte) bool {
	if len(body) == 0 {
		return false
	}
	if enc := header.Get("Content-Encoding"); enc != "" && !strings.EqualFold(enc, "identity") {
		return false
	}
	if i := skipSpace(body, 0); i < len(body) && (body[i] == '{' || body[i] == '[') {
		return true
	}
	media, _, _ := mime.ParseMediaType(header.Get("Content-Type"))
	return media == "application/json" || strings.HasSuffix(media, "+json")
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
