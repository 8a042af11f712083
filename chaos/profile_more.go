package chaos

import (
	"cmp"
	"net/http"
	"strconv"
	"strings"
	"time"
)

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
	limits: func(h http.Header, exhausted bool, _ time.Duration) {
		requests, tokens := "79", "79983"
		if exhausted {
			requests, tokens = "0", "0"
		}
		h.Set("x-ratelimit-remaining-requests", requests)
		h.Set("x-ratelimit-remaining-tokens", tokens)
	},
	success: func(w http.ResponseWriter, r *http.Request, c *call) { openAI.success(w, r, c) },
}

// The bedrock profile: the Bedrock runtime's Converse API. Errors name
// their type in the x-amzn-ErrorType header and say only
// {"message": …}; Bedrock sends no wait hint. Successes are Converse
// responses; it does not stream (Bedrock's event stream is binary).

var bedrock = &profile{
	name:  ProfileBedrock,
	model: "anthropic.claude-chaos-v1:0",
	errors: map[fault]apiError{
		faultRateLimit:   {status: 429, typ: "ThrottlingException", message: "Too many requests, please wait before trying again."},
		faultUnavailable: {status: 503, typ: "ServiceUnavailableException", message: "Bedrock is unable to process your request."},
		faultInternal: {status: 500, typ: "InternalServerException",
			message: "The system encountered an unexpected error during processing. Try your request again."},
		faultBadRequest: {status: 400, typ: "ValidationException",
			message: "Malformed input request, please reformat your input and try again."},
		faultOverload: {status: 503, typ: "ServiceUnavailableException",
			message: "The model is overloaded. Please try again later."},
		faultQuota: {status: 429, typ: "ThrottlingException", message: "Too many tokens per day, please wait before trying again."},
		faultContext: {status: 400, typ: "ValidationException",
			message: "The model returned the following errors: Input is too long for requested model."},
	},
	errorBody: func(e apiError, _ *call) any { return object{"message": e.message} },
	errorHeaders: func(h http.Header, e apiError) {
		h.Set("x-amzn-ErrorType", e.typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	},
	idHeader: "x-amzn-RequestId",
	success: func(w http.ResponseWriter, r *http.Request, c *call) {
		writeJSON(w, http.StatusOK, object{
			"output":     object{"message": object{"role": "assistant", "content": []object{{"text": c.deliver()}}}},
			"stopReason": c.finish("end_turn", "max_tokens"),
			"usage":      object{"inputTokens": c.input, "outputTokens": c.outputTokens(), "totalTokens": c.input + c.outputTokens()},
			"metrics":    object{"latencyMs": 1},
		})
	},
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
}
