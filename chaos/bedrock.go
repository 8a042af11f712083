package chaos

import (
	"net/http"

	"github.com/rebound-go/rebound/internal/usage"
)

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
		text, out := c.deliver(), c.outputTokens()
		u := c.usageObject(&usage.Bedrock, out, true)
		u["totalTokens"] = c.input + out
		writeJSON(w, http.StatusOK, object{
			"output":     object{"message": object{"role": "assistant", "content": []object{{"text": text}}}},
			"stopReason": c.finish("end_turn", "max_tokens"),
			"usage":      u,
			"metrics":    object{"latencyMs": 1},
		})
	},
	dialect: func(string) *usage.Dialect { return &usage.Bedrock },
}
