package chaos

import (
	"cmp"
	"net/http"
	"strconv"
	"strings"

	"github.com/rebound-go/rebound/internal/provider"
	"github.com/rebound-go/rebound/internal/usage"
)

// The gemini profile.

var gemini = &profile{
	name:  ProfileGemini,
	model: "gemini-chaos",
	errors: map[fault]apiError{
		faultRateLimit: {status: 429, typ: "RESOURCE_EXHAUSTED", code: "GenerateRequestsPerMinutePerProjectPerModel",
			message: "Resource has been exhausted (e.g. check quota)."},
		faultUnavailable: {status: 503, typ: "UNAVAILABLE", message: "The service is currently unavailable."},
		faultInternal:    {status: 500, typ: "INTERNAL", message: "Internal error encountered."},
		faultBadRequest:  {status: 400, typ: "INVALID_ARGUMENT", message: "Request contains an invalid argument."},
		faultOverload:    {status: 503, typ: "UNAVAILABLE", message: "The model is overloaded. Please try again later."},
		faultQuota: {status: 429, typ: "RESOURCE_EXHAUSTED", code: "GenerateRequestsPerDayPerProjectPerModel-FreeTier",
			message: "You exceeded your current quota, please check your plan and billing details."},
		faultContext: {status: 400, typ: "INVALID_ARGUMENT",
			message: "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."},
	},
	errorBody: func(e apiError, c *call) any {
		body := geminiError{geminiErrorDetail{Code: e.status, Message: e.message, Status: e.typ}}
		if e.code != "" {
			body.Error.Details = append(body.Error.Details, object{
				"@type": "type.googleapis.com/google.rpc.QuotaFailure",
				"violations": []object{{
					"quotaMetric": "generativelanguage.googleapis.com/generate_content_requests",
					"quotaId":     e.code,
				}},
			})
		}
		if c.wait != noHint {
			body.Error.Details = append(body.Error.Details, object{
				"@type":      "type.googleapis.com/google.rpc.RetryInfo",
				"retryDelay": strconv.FormatInt(c.wait, 10) + "s",
			})
		}
		return body
	},
	success: func(w http.ResponseWriter, r *http.Request, c *call) {
		model := cmp.Or(provider.GeminiModel(r.URL.Path), c.profile.model)
		c.answers, c.thoughts = c.req.asks.answers, c.req.asks.thoughts
		if strings.Contains(r.URL.Path, ":streamGenerateContent") {
			streamGemini(w, c, model)
			return
		}
		writeJSON(w, http.StatusOK, geminiResponse(c, model, c.deliver(), true))
	},
	dialect: func(string) *usage.Dialect { return &usage.Gemini },
}

type geminiError struct {
	Error geminiErrorDetail `json:"error"`
}

type geminiErrorDetail struct {
	Code    int      `json:"code"`
	Message string   `json:"message"`
	Status  string   `json:"status"`
	Details []object `json:"details,omitempty"`
}

// geminiResponse returns a GenerateContentResponse with text, in each of
// c's candidates; the last one of an answer also has the finish reason
// and the usage, its thoughts counted apart (and only if there were any,
// as Gemini does).
func geminiResponse(c *call, model, text string, last bool) object {
	candidates := make([]object, c.answers)
	for i := range candidates {
		candidates[i] = object{
			"content": object{"parts": []object{{"text": text}}, "role": "model"},
			"index":   i,
		}
		if last {
			candidates[i]["finishReason"] = c.finish("STOP", "MAX_TOKENS")
		}
	}
	resp := object{
		"candidates":   candidates,
		"modelVersion": model,
		"responseId":   "chaos-" + strconv.FormatUint(c.n, 10),
	}
	if last {
		out := c.outputTokens()
		u := c.usageObject(&usage.Gemini, out-c.thoughts, true)
		if c.thoughts > 0 {
			u[usage.Gemini.Output[1]] = c.thoughts // thoughtsTokenCount
		}
		u["totalTokenCount"] = c.input + out
		resp["usageMetadata"] = u
	}
	return resp
}
