// Package provider reads the error bodies of the LLM providers and the
// servers that imitate them, so that rebound's default classifier knows
// their errors with no configuration: a Transport pointed at any of them,
// at a proxy in front of them, or at a test server that speaks their
// dialect just works. The shapes, all read by one lenient decoder:
//
//	OpenAI, Azure, Groq, DeepSeek, OpenRouter, llama.cpp, newer vLLM
//	           {"error": {"message", "type", "param", "code", "status"}}
//	Anthropic  {"type": "error", "error": {"type", "message", "details": {"error_code"}}}
//	Gemini, Vertex
//	           {"error": {"code", "message", "status", "details": [{"@type", ...}]}},
//	           alone or wrapped in an array
//	Mistral, older vLLM, Bedrock
//	           {"object": "error", "message", "type", "code"} at the top level;
//	           Bedrock's type travels in the x-amzn-ErrorType header
//	TGI, Ollama, LM Studio
//	           {"error": "message", "error_type"}
//
// Fields may be strings, numbers or null (Azure's status and OpenRouter's
// code are numbers): a field of an unexpected type is ignored, never a
// reason to ignore the whole body. What a body says is a Class; the root
// package turns it into a Kind.
package provider

import (
	"bytes"
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rebound-go/rebound/internal/header"
	"github.com/rebound-go/rebound/internal/runes"
)

// Error is what an error response says, in the union of the providers'
// shapes.
type Error struct {
	// Message is the error's message; for an OpenRouter error, followed
	// by the upstream provider's own words (metadata.raw).
	Message string
	// Type is OpenAI's type, Anthropic's error.type, TGI's error_type or
	// Bedrock's x-amzn-ErrorType.
	Type string
	// Code is a string code (OpenAI's, Azure's); a numeric one is ignored.
	Code string
	// Status is Gemini's status, e.g. RESOURCE_EXHAUSTED.
	Status string
	// ErrorCode is Anthropic's error.details.error_code.
	ErrorCode string
	// InnerCode is Azure's innererror.code, e.g.
	// ResponsibleAIPolicyViolation.
	InnerCode string
	// HTTPStatus is an HTTP status the error names (a number or numeric
	// string from 400 to 599 in error.code, status, status_code or
	// http_status_code): the only status an error event inside a stream
	// has.
	HTTPStatus int
	// headerWait says the response's headers ask for a wait.
	headerWait bool
	// QuotaIDs are the quotas a Google error names: QuotaFailure
	// violations' quotaId and quotaMetric, ErrorInfo's quota_limit and
	// quota_metric.
	QuotaIDs []string
	// RetryDelay is Gemini's RetryInfo.retryDelay, if valid.
	RetryDelay    time.Duration
	HasRetryDelay bool
	// RetryAfter is a top-level body "retry_after" in seconds (or a model
	// server's "estimated_time" to load, or OpenRouter's
	// metadata.retry_after_seconds), if valid.
	RetryAfter    time.Duration
	HasRetryAfter bool
}

// bodyJSON is the top level of an error body. Every field is raw: a field
// of an unexpected type must not void the others.
type bodyJSON struct {
	Error         json.RawMessage `json:"error"`
	Response      json.RawMessage `json:"response"` // OpenAI's response.failed event
	RetryAfter    json.RawMessage `json:"retry_after"`
	EstimatedTime json.RawMessage `json:"estimated_time"`
	ErrorType     json.RawMessage `json:"error_type"`
	Detail        json.RawMessage `json:"detail"`
	errorJSON
}

type errorJSON struct {
	Message    json.RawMessage `json:"message"`
	Type       json.RawMessage `json:"type"`
	Code       json.RawMessage `json:"code"`
	Status     json.RawMessage `json:"status"`
	StatusCode json.RawMessage `json:"status_code"`
	HTTPCode   json.RawMessage `json:"http_status_code"`
	Details    json.RawMessage `json:"details"`
	InnerErr   json.RawMessage `json:"innererror"`
	Metadata   json.RawMessage `json:"metadata"`
	ErrorCode  json.RawMessage `json:"error_code"`
}

type detailJSON struct {
	Type       json.RawMessage `json:"@type"`
	RetryDelay json.RawMessage `json:"retryDelay"`
	Violations []struct {
		QuotaID     json.RawMessage `json:"quotaId"`
		QuotaMetric json.RawMessage `json:"quotaMetric"`
	} `json:"violations"`
	Metadata map[string]json.RawMessage `json:"metadata"`
}

// Read reads an error response: its body in any of the shapes, and the
// x-amzn-ErrorType header Bedrock names its errors in. A body that is not
// JSON (a gateway's or a local server's plain words: "Too many tokens per
// day, please wait before trying again.") is read as a message, as is a
// body that is one JSON string. It reports false when nothing says
// anything.
func Read(h http.Header, body []byte) (Error, bool) {
	pe, ok := Parse(body)
	if !ok {
		pe.Message, ok = plainMessage(body)
	}
	pe.headerWait = h.Get("Retry-After") != "" || h.Get("Retry-After-Ms") != ""
	if t := amznType(h.Get("X-Amzn-Errortype")); t != "" {
		if pe.Type == "" {
			pe.Type = t
		}
		ok = true
	}
	return pe, ok
}

// plainMessage is the message of a body in no JSON shape: its text, or the
// string it holds. An HTML page is no message: its words are the page's,
// not the error's.
func plainMessage(body []byte) (string, bool) {
	body = bytes.TrimSpace(body)
	switch {
	case len(body) == 0, body[0] == '{', body[0] == '[', body[0] == '<':
		return "", false
	case body[0] == '"':
		msg := text(body)
		return msg, msg != ""
	}
	if !utf8.Valid(body) {
		return "", false
	}
	return string(body), true
}

// amznType is the error type in an x-amzn-ErrorType header:
// "ThrottlingException:http://internal.amazon.com/coral/..." names
// ThrottlingException.
func amznType(s string) string {
	s, _, _ = strings.Cut(s, ":")
	return strings.TrimSpace(s)
}

// Parse reads an error body in any of the shapes. It reports false for a
// body that is not JSON or has no error in it.
func Parse(body []byte) (Error, bool) {
	var pe Error
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '[' { // Vertex: [{"error": {...}}]
		body = firstElement(body)
	}
	if len(body) == 0 || body[0] != '{' {
		return pe, false
	}
	var top bodyJSON
	if json.Unmarshal(body, &top) != nil {
		return pe, false
	}
	pe.RetryAfter, pe.HasRetryAfter = seconds(top.RetryAfter)
	if !pe.HasRetryAfter {
		pe.RetryAfter, pe.HasRetryAfter = seconds(top.EstimatedTime)
	}
	raw := bytes.TrimSpace(top.Error)
	if len(raw) == 0 && len(top.Response) > 0 {
		var r struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(top.Response, &r) == nil {
			raw = bytes.TrimSpace(r.Error)
		}
	}
	switch {
	case len(raw) > 0 && raw[0] == '{':
		var e errorJSON
		if json.Unmarshal(raw, &e) != nil {
			return pe, pe.HasRetryAfter
		}
		pe.read(&e)
		return pe, true
	case len(raw) > 0 && raw[0] == '"': // TGI, Ollama, LM Studio, some proxies
		pe.Message, pe.Type = text(raw), text(top.ErrorType)
		return pe, true
	}
	// Mistral, older vLLM and Bedrock put the error at the top level;
	// Anthropic's top-level "type" is "error" and its error is nested, so
	// a top-level type counts only with a message beside it.
	if msg := text(top.Message); msg != "" {
		pe.read(&top.errorJSON)
		return pe, true
	}
	if msg := text(top.Detail); msg != "" { // FastAPI servers
		pe.Message = msg
		return pe, true
	}
	return pe, pe.HasRetryAfter
}

// firstElement is the first element of a JSON array, nil if there is none;
// the others are neither decoded nor kept.
func firstElement(array []byte) []byte {
	dec := json.NewDecoder(bytes.NewReader(array))
	var first json.RawMessage
	if _, err := dec.Token(); err != nil || !dec.More() || dec.Decode(&first) != nil {
		return nil
	}
	return bytes.TrimSpace(first)
}

// read fills pe from an error object.
func (pe *Error) read(e *errorJSON) {
	pe.Message, pe.Type, pe.Code, pe.Status = text(e.Message), text(e.Type), text(e.Code), text(e.Status)
	pe.ErrorCode = text(e.ErrorCode)
	for _, n := range [...]json.RawMessage{e.Code, e.Status, e.StatusCode, e.HTTPCode} {
		n = bytes.Trim(bytes.TrimSpace(n), `"`)
		if s, err := strconv.Atoi(string(n)); err == nil && s >= 400 && s <= 599 {
			pe.HTTPStatus = s
			break
		}
	}
	var inner struct {
		Code json.RawMessage `json:"code"`
	}
	if json.Unmarshal(e.InnerErr, &inner) == nil {
		pe.InnerCode = text(inner.Code)
	}
	var meta struct {
		Raw        json.RawMessage `json:"raw"`
		RetryAfter json.RawMessage `json:"retry_after_seconds"`
	}
	if json.Unmarshal(e.Metadata, &meta) == nil { // OpenRouter's upstream
		if raw := text(meta.Raw); raw != "" {
			pe.Message += "\n" + raw
		}
		if !pe.HasRetryAfter {
			pe.RetryAfter, pe.HasRetryAfter = seconds(meta.RetryAfter)
		}
	}
	details := bytes.TrimSpace(e.Details)
	switch {
	case len(details) > 0 && details[0] == '{':
		var d struct {
			ErrorCode json.RawMessage `json:"error_code"`
		}
		if json.Unmarshal(details, &d) == nil {
			pe.ErrorCode = text(d.ErrorCode)
		}
	case len(details) > 0 && details[0] == '[':
		var ds []detailJSON
		if json.Unmarshal(details, &ds) != nil {
			return
		}
		for _, d := range ds {
			switch typ := text(d.Type); {
			case strings.HasSuffix(typ, "google.rpc.RetryInfo"):
				pe.RetryDelay, pe.HasRetryDelay = protoDuration(text(d.RetryDelay))
			case strings.HasSuffix(typ, "google.rpc.QuotaFailure"):
				for _, v := range d.Violations {
					pe.quota(text(v.QuotaID), text(v.QuotaMetric))
				}
			case strings.HasSuffix(typ, "google.rpc.ErrorInfo"):
				pe.quota(text(d.Metadata["quota_limit"]), text(d.Metadata["quota_metric"]))
			}
		}
	}
}

// quota notes the quotas a Google error names.
func (pe *Error) quota(ids ...string) {
	for _, id := range ids {
		if id != "" {
			pe.QuotaIDs = append(pe.QuotaIDs, id)
		}
	}
}

// text is raw's value if it is a JSON string, else "".
func text(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// protoDuration reads a google.protobuf.Duration in its JSON form
// ("53s", "1.5s"), bounded by header.MaxHint.
func protoDuration(s string) (time.Duration, bool) {
	num, ok := strings.CutSuffix(strings.TrimSpace(s), "s")
	if !ok {
		return 0, false
	}
	return header.Seconds(num)
}

// seconds reads a JSON number or numeric string of seconds.
func seconds(raw json.RawMessage) (time.Duration, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0, false
	}
	s := string(raw)
	if raw[0] == '"' {
		s = text(raw)
	}
	return header.Seconds(s)
}

// Wait returns the wait the body asks for: Gemini's RetryInfo.retryDelay,
// else a top-level "retry_after" (or "estimated_time"), else a wait its
// message names ("Please try again in 7.66s").
func (pe *Error) Wait() (time.Duration, bool) {
	switch {
	case pe.HasRetryDelay:
		return pe.RetryDelay, true
	case pe.HasRetryAfter:
		return pe.RetryAfter, true
	}
	return MessageWait(pe.Message)
}

// Identifiers returns the error's type (OpenAI's, Anthropic's, TGI's and
// Bedrock's type, Gemini's status) and code (OpenAI's code, Anthropic's
// details.error_code, Azure's innererror code), each fit to log: see
// Identifier.
func (pe *Error) Identifiers() (errType, code string) {
	return Identifier(cmp.Or(pe.Type, pe.Status)), Identifier(cmp.Or(pe.Code, pe.ErrorCode, pe.InnerCode))
}

// maxIdentifier bounds an error type or code fit to log.
const maxIdentifier = 64

// Identifier is s fit to log as an error type or code: at most
// maxIdentifier bytes, cut on a rune boundary, with no control characters.
// A provider's type is a short word; a hostile one could send 60 KB of
// terminal escapes, and every log record would carry them.
func Identifier(s string) string {
	s = runes.Cut(s, maxIdentifier)
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
