package chaos

import (
	"cmp"
	"net/http"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/usage"
)

// The anthropic profile.

var anthropic = &profile{
	name:  ProfileAnthropic,
	model: "claude-chaos",
	errors: map[fault]apiError{
		faultRateLimit: {status: 429, typ: "rate_limit_error",
			message: "This request would exceed your account's rate limit. Please try again later."},
		faultUnavailable: {status: 503, typ: "api_error", message: "Internal server error"},
		faultInternal:    {status: 500, typ: "api_error", message: "Internal server error"},
		faultBadRequest: {status: 400, typ: "invalid_request_error",
			message: "Invalid request (injected by the chaos server)."},
		faultOverload: {status: 529, typ: "overloaded_error", message: "Overloaded"},
		faultQuota: {status: 429, typ: "rate_limit_error", code: "enforced_spend_limit_reached",
			message: "This request would exceed your account's monthly spend limit. Please try again later."},
		faultContext: {status: 400, typ: "invalid_request_error",
			message: "prompt is too long: 210000 tokens > 200000 maximum"},
	},
	errorBody: func(e apiError, c *call) any {
		body := anthropicError{Type: "error", RequestID: c.requestID()}
		body.Error.Type = e.typ
		body.Error.Message = e.message
		if e.code != "" {
			body.Error.Details = &anthropicErrorDetails{ErrorCode: e.code}
		}
		return body
	},
	hint:     retryAfterHint,
	idHeader: "request-id",
	limits: func(h http.Header, q quotas) {
		at := time.Now().Add(q.reset).UTC().Format(time.RFC3339Nano)
		h.Set("anthropic-ratelimit-requests-limit", strconv.FormatInt(q.requestsLimit, 10))
		h.Set("anthropic-ratelimit-requests-remaining", strconv.FormatInt(q.requestsLeft, 10))
		h.Set("anthropic-ratelimit-requests-reset", at)
		h.Set("anthropic-ratelimit-tokens-limit", strconv.FormatInt(q.tokensLimit, 10))
		h.Set("anthropic-ratelimit-tokens-remaining", strconv.FormatInt(q.tokensLeft, 10))
		h.Set("anthropic-ratelimit-tokens-reset", at)
	},
	quotas:    quotas{requestsLimit: 50, requestsLeft: 49, tokensLimit: 30000, tokensLeft: 29983},
	exhausted: quotas{requestsLimit: 50, requestsLeft: 0, tokensLimit: 30000, tokensLeft: 29983},
	success: func(w http.ResponseWriter, r *http.Request, c *call) {
		req := c.req
		model := cmp.Or(req.Model, c.profile.model)
		if req.Stream {
			streamMessage(w, c, model)
			return
		}
		content := []any{object{"type": "text", "text": c.deliver()}}
		writeJSON(w, http.StatusOK, anthropicMessage(c, model, content, c.finish("end_turn", "max_tokens"), c.outputTokens()))
	},
	dialect: func(string) *usage.Dialect { return &usage.Anthropic },
}

type anthropicError struct {
	Type  string `json:"type"`
	Error struct {
		Type    string                 `json:"type"`
		Message string                 `json:"message"`
		Details *anthropicErrorDetails `json:"details"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

type anthropicErrorDetails struct {
	ErrorCode string `json:"error_code"`
}

// anthropicMessage returns a Messages API message; a stop reason of ""
// stands for null.
func anthropicMessage(c *call, model string, content []any, stopReason string, output int) object {
	return object{
		"id":            "msg_chaos_" + strconv.FormatUint(c.n, 10),
		"type":          "message",
		"role":          "assistant",
		"model":         model,
		"content":       content,
		"stop_reason":   nullable(stopReason),
		"stop_sequence": nil,
		"usage":         c.usageObject(&usage.Anthropic, output, false),
	}
}
