package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
)

var errTooLarge = errors.New("request body too large")

// readBody reads r's body, at most limit bytes.
func readBody(r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	if r.ContentLength > limit {
		return nil, errTooLarge
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errTooLarge
	}
	return b, nil
}

// modelOf returns the model a request asks for: in a Gemini path
// (".../models/NAME:verb"), or the JSON body's top-level "model"; empty
// when it has none, or is not JSON (it goes to the upstream unchanged all
// the same, whose 400 is the truth).
func modelOf(path string, body []byte) string {
	if m := pathModel(path); m != "" {
		return m
	}
	start, end := modelSpan(body)
	var m string
	if start < 0 || json.Unmarshal(body[start:end], &m) != nil {
		return ""
	}
	return m
}

// pathModel returns the model of a Gemini path, or "".
func pathModel(path string) string {
	_, rest, ok := strings.Cut(path, "/models/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	return name
}

// renamePathModel returns path asking for model instead, if it names one.
func renamePathModel(path, model string) string {
	old := pathModel(path)
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
	start, end := modelSpan(body)
	if start < 0 {
		return body
	}
	out := make([]byte, 0, len(body)+len(model))
	out = append(out, body[:start]...)
	out = strconv.AppendQuote(out, model)
	return append(out, body[end:]...)
}

// modelSpan returns where the value of a JSON object's top-level "model"
// key lies in body, or -1, -1.
func modelSpan(body []byte) (start, end int) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return -1, -1
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return -1, -1
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return -1, -1
		}
		if k == "model" {
			end := int(dec.InputOffset())
			return end - len(v), end
		}
	}
	return -1, -1
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
	}
	return "INTERNAL"
}
