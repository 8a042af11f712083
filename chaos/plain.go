package chaos

import (
	"cmp"
	"net/http"
	"strconv"
)

// The plain profile: today's bodies, and a Retry-After header as the hint.
// It streams only in stream-cut mode.

var plain = &profile{
	name: ProfilePlain,
	errors: map[fault]apiError{
		faultRateLimit:   {status: 429, typ: "chaos_injected", message: "chaos: injected 429 Too Many Requests"},
		faultUnavailable: {status: 503, typ: "chaos_injected", message: "chaos: injected 503 Service Unavailable"},
		faultInternal:    {status: 500, typ: "chaos_injected", message: "chaos: injected 500 Internal Server Error"},
		faultBadRequest:  {status: 400, typ: "chaos_injected", message: "chaos: injected 400 Bad Request"},
		faultOverload:    {status: 529, typ: "chaos_injected", message: "chaos: injected 529 Overloaded"},
		faultQuota:       {status: 429, typ: "insufficient_quota", message: "chaos: injected 429 Too Many Requests: quota exhausted"},
		faultContext:     {status: 413, typ: "request_too_large", message: "chaos: injected 413 Request Entity Too Large: prompt too long"},
	},
	errorBody: func(e apiError, c *call) any {
		return errorBody{errorDetail{Message: e.message, Type: e.typ, Code: cmp.Or(e.code, c.mode)}}
	},
	hint: retryAfterHint,
	success: func(w http.ResponseWriter, r *http.Request, c *call) {
		switch {
		case c.mode == ModeText && c.text.stream, c.mode == ModeStreamCut && c.req.Stream:
			streamPlain(w, c)
		case c.mode == ModeText:
			writeJSON(w, http.StatusOK, okBody{OK: true, Request: c.n, Text: c.deliver()})
		default:
			writeJSON(w, http.StatusOK, okBody{OK: true, Request: c.n})
		}
	},
}

func retryAfterHint(h http.Header, secs int64) {
	h.Set("Retry-After", strconv.FormatInt(secs, 10))
}

type okBody struct {
	OK      bool   `json:"ok"`
	Request uint64 `json:"request"`
	Text    string `json:"text,omitempty"` // text mode only
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

func writeError(w http.ResponseWriter, status int, msg, typ, code string) {
	writeJSON(w, status, errorBody{errorDetail{Message: msg, Type: typ, Code: code}})
}
