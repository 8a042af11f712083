package chaos

import (
	"cmp"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/usage"
)

// The openai profile: OpenAI's Chat Completions and Responses APIs. The
// azure and local profiles, below, answer with its successes and streams
// and errors of their own.

var openAI = &profile{
	name:  ProfileOpenAI,
	model: "gpt-chaos",
	errors: map[fault]apiError{
		faultRateLimit: {status: 429, typ: "requests", code: "rate_limit_exceeded",
			message: "Rate limit reached for requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again later."},
		faultUnavailable: {status: 503, typ: "server_error",
			message: "The service is temporarily unavailable. Please try again later."},
		faultInternal: {status: 500, typ: "server_error",
			message: "The server had an error while processing your request. Sorry about that!"},
		faultBadRequest: {status: 400, typ: "invalid_request_error",
			message: "Invalid request (injected by the chaos server)."},
		faultOverload: {status: 503, typ: "server_error",
			message: "The server is overloaded or not ready yet."},
		faultQuota: {status: 429, typ: "insufficient_quota", code: "insufficient_quota",
			message: "You exceeded your current quota, please check your plan and billing details."},
		faultContext: {status: 400, typ: "invalid_request_error", code: "context_length_exceeded", param: "messages",
			message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages."},
	},
	errorBody: func(e apiError, _ *call) any {
		return openAIError{openAIErrorDetail{Message: e.message, Type: e.typ, Param: nullable(e.param), Code: nullable(e.code)}}
	},
	hint: func(h http.Header, secs int64) {
		h.Set("retry-after-ms", strconv.FormatInt(secs*1000, 10))
		retryAfterHint(h, secs)
	},
	idHeader: "x-request-id",
	limits: func(h http.Header, q quotas) {
		h.Set("x-ratelimit-limit-requests", strconv.FormatInt(q.requestsLimit, 10))
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(q.requestsLeft, 10))
		h.Set("x-ratelimit-reset-requests", q.reset.String())
		h.Set("x-ratelimit-limit-tokens", strconv.FormatInt(q.tokensLimit, 10))
		h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(q.tokensLeft, 10))
		h.Set("x-ratelimit-reset-tokens", q.reset.String())
	},
	quotas:    quotas{requestsLimit: 500, requestsLeft: 499, tokensLimit: 30000, tokensLeft: 29983},
	exhausted: quotas{requestsLimit: 500, requestsLeft: 0, tokensLimit: 30000, tokensLeft: 29983},
	success: func(w http.ResponseWriter, r *http.Request, c *call) {
		req := c.req
		model := cmp.Or(req.Model, c.profile.model)
		switch {
		case strings.HasSuffix(r.URL.Path, "/responses") && req.Stream:
			streamResponse(w, c, model)
		case strings.HasSuffix(r.URL.Path, "/responses"):
			status := c.responseStatus()
			writeJSON(w, http.StatusOK, openAIResponse(c, model, status, []any{openAIMessage(c, status, c.deliver())}))
		case req.Stream:
			streamChat(w, c, model, req.StreamOptions.IncludeUsage)
		default:
			writeJSON(w, http.StatusOK, openAIChat(c, model))
		}
	},
	dialect: func(path string) *usage.Dialect {
		if strings.HasSuffix(path, "/responses") {
			return &usage.OpenAIResponses
		}
		return &usage.OpenAIChat
	},
}

type openAIError struct {
	Error openAIErrorDetail `json:"error"`
}

type openAIErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func openAIChat(c *call, model string) object {
	c.answers = c.req.asks.answers
	text := c.deliver()
	choices := make([]object, c.answers)
	for i := range choices {
		choices[i] = object{
			"index":         i,
			"message":       object{"role": "assistant", "content": text, "refusal": nil, "annotations": []any{}},
			"logprobs":      nil,
			"finish_reason": c.finish("stop", "length"),
		}
	}
	return object{
		"id":           "chatcmpl-chaos-" + strconv.FormatUint(c.n, 10),
		"object":       "chat.completion",
		"created":      time.Now().Unix(),
		"model":        model,
		"choices":      choices,
		"usage":        openAIChatUsage(c),
		"service_tier": "default",
	}
}

func openAIChatUsage(c *call) object {
	out := c.outputTokens()
	u := c.usageObject(&usage.OpenAIChat, out, false)
	u["total_tokens"] = c.input + out
	u["completion_tokens_details"] = object{"reasoning_tokens": 0}
	return u
}

// responseStatus returns the status of c's finished Responses API
// response: completed, or incomplete if the output cap cut it short.
func (c *call) responseStatus() string {
	return c.finish("completed", "incomplete")
}

// openAIResponse returns a Responses API object with the given status and
// output; a finished one, completed or incomplete, reports its usage and,
// if incomplete, that the output cap was reached.
func openAIResponse(c *call, model, status string, output []any) object {
	var used, incomplete any
	if status != "in_progress" {
		out := c.outputTokens()
		u := c.usageObject(&usage.OpenAIResponses, out, false)
		u["output_tokens_details"] = object{"reasoning_tokens": 0}
		u["total_tokens"] = c.input + out
		used = u
	}
	if status == "incomplete" {
		incomplete = object{"reason": "max_output_tokens"}
	}
	return object{
		"id":                  "resp_chaos_" + strconv.FormatUint(c.n, 10),
		"object":              "response",
		"created_at":          time.Now().Unix(),
		"status":              status,
		"error":               nil,
		"incomplete_details":  incomplete,
		"instructions":        nil,
		"max_output_tokens":   nil,
		"model":               model,
		"output":              output,
		"parallel_tool_calls": true,
		"temperature":         1,
		"tool_choice":         "auto",
		"tools":               []any{},
		"top_p":               1,
		"usage":               used,
	}
}

// openAIMessage returns a Responses API output message with the given
// status; an empty text stands for no content yet.
func openAIMessage(c *call, status, text string) object {
	content := []any{}
	if text != "" {
		content = append(content, openAIOutputText(text))
	}
	return object{
		"type":    "message",
		"id":      "msg_chaos_" + strconv.FormatUint(c.n, 10),
		"status":  status,
		"role":    "assistant",
		"content": content,
	}
}

func openAIOutputText(text string) object {
	return object{"type": "output_text", "text": text, "annotations": []any{}, "logprobs": []any{}}
}

// The azure profile: Azure OpenAI. Successes and streams are OpenAI's;
// errors have Azure's shape and words, a wait hint is also spelt out in
// the message, and a content filter's error carries a numeric status.

var azure = &profile{
	name:  ProfileAzure,
	model: "gpt-4o-chaos",
	errors: map[fault]apiError{
		faultRateLimit: {status: 429, code: "429",
			message: "Requests to the ChatCompletions_Create Operation under Azure OpenAI API version 2024-10-21 have exceeded token rate limit of your current OpenAI S0 pricing tier."},
		faultUnavailable: {status: 503, code: "ServiceUnavailable",
			message: "The service is temporarily unable to process your request. Please try again later."},
		faultInternal: {status: 500, typ: "server_error",
			message: "The server had an error while processing your request. Sorry about that! You can retry your request, or contact us through an Azure support request if the error persists."},
		faultBadRequest: {status: 400, typ: "invalid_request_error", code: "content_filter", param: "prompt",
			message: "The response was filtered due to the prompt triggering Azure OpenAI's content management policy. Please modify your prompt and retry."},
		faultOverload: {status: 503, typ: "server_error",
			message: "The engine is currently overloaded, please try again later."},
		faultQuota: {status: 403, code: "403",
			message: "Out of call volume quota for OpenAI S0 pricing tier. Please retry after 1 day. To increase your call volume switch to a paid tier."},
		faultContext: {status: 400, typ: "invalid_request_error", code: "context_length_exceeded", param: "messages",
			message: "This model's maximum context length is 128000 tokens. However, your messages resulted in 131072 tokens. Please reduce the length of the messages."},
	},
	errorBody: func(e apiError, c *call) any {
		detail := object{"code": nullable(e.code), "message": e.message}
		if e.typ != "" {
			detail["type"], detail["param"] = e.typ, nullable(e.param)
		}
		if e.code == "content_filter" {
			detail["status"] = e.status
			detail["innererror"] = object{"code": "ResponsibleAIPolicyViolation", "content_filter_result": object{
				"hate": object{"filtered": true, "severity": "high"},
			}}
		}
		if e.status == http.StatusTooManyRequests && c.wait != noHint {
			detail["message"] = e.message + " Please retry after " + strconv.FormatInt(c.wait, 10) + " seconds."
		}
		return object{"error": detail}
	},
	hint:     openAI.hint,
	idHeader: "apim-request-id",
	limits: func(h http.Header, q quotas) {
		h.Set("x-ratelimit-remaining-requests", strconv.FormatInt(q.requestsLeft, 10))
		h.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(q.tokensLeft, 10))
	},
	quotas:    quotas{requestsLeft: 79, tokensLeft: 79983},
	exhausted: quotas{},
	success:   func(w http.ResponseWriter, r *http.Request, c *call) { openAI.success(w, r, c) },
	dialect:   openAI.dialect,
}

// The local profile: an OpenAI-compatible server on the agent's own
// machine, as llama.cpp's server answers: successes and streams are
// OpenAI's; errors are {"error":{"code":N,"message":…,"type":…}} with a
// numeric code. A model still loading is a 503; a full queue is Ollama's
// "server busy"; an exhausted budget is the gateway's in front of it. It
// sends no wait hints and no rate-limit headers.

var local = &profile{
	name:  ProfileLocal,
	model: "local-chaos",
	errors: map[fault]apiError{
		faultRateLimit:   {status: 429, typ: "rate_limit_error", message: "Too many requests: max parallel request limit reached."},
		faultUnavailable: {status: 503, typ: "unavailable_error", message: "Loading model"},
		faultInternal:    {status: 500, typ: "server_error", message: "Failed to decode the batch"},
		faultBadRequest:  {status: 400, typ: "invalid_request_error", message: "Invalid request (injected by the chaos server)."},
		faultOverload: {status: 503, typ: "unavailable_error",
			message: "server busy, please try again.  maximum pending requests exceeded"},
		faultQuota: {status: 400, typ: "budget_exceeded",
			message: "Budget has been exceeded! Current cost: 10.02, Max budget: 10.0"},
		faultContext: {status: 400, typ: "exceed_context_size_error",
			message: "the request exceeds the available context size, try increasing it"},
	},
	errorBody: func(e apiError, _ *call) any {
		detail := object{"code": e.status, "message": e.message, "type": e.typ}
		if e.typ == "exceed_context_size_error" {
			detail["n_prompt_tokens"], detail["n_ctx"] = 5000, 4096
		}
		return object{"error": detail}
	},
	success: func(w http.ResponseWriter, r *http.Request, c *call) {
		req := c.req
		model := cmp.Or(req.Model, c.profile.model)
		if req.Stream && !strings.HasSuffix(r.URL.Path, "/responses") {
			streamChat(w, c, model, req.StreamOptions.IncludeUsage)
			return
		}
		writeJSON(w, http.StatusOK, openAIChat(c, model))
	},
	// It answers the Responses API's path with a chat completion too.
	dialect: func(string) *usage.Dialect { return &usage.OpenAIChat },
}
