package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/provider"
)

// A profile is the wire format of one provider: how it words each fault,
// where it puts a wait hint, which headers it adds and how it answers a
// success.
type profile struct {
	name  string
	model string // the model a success names when the request names none

	// errors words every fault but faultNone and faultReset.
	errors map[fault]apiError
	// errorBody returns the JSON body of e, a failure of c.
	errorBody func(e apiError, c *call) any
	// errorHeaders, if set, adds the headers of a failure e.
	errorHeaders func(h http.Header, e apiError)
	// hint sets the headers of a wait hint of secs seconds; nil if the
	// hint goes in the error body or is never sent.
	hint func(h http.Header, secs int64)
	// idHeader is the header that carries the request id, if any.
	idHeader string
	// limits sets rate-limit headers with the requests left (0 if
	// exhausted) and the time until the limits reset; nil for none.
	limits func(h http.Header, exhausted bool, reset time.Duration)
	// success answers c with a success.
	success func(w http.ResponseWriter, r *http.Request, c *call)
}

// An apiError is a failure as a profile words it. What code and typ mean
// depends on the profile.
type apiError struct {
	status int
	// typ is the error type; for gemini, the status name.
	typ string
	// code is the error code in plain (the mode if empty) and openai; for
	// anthropic, the details' error_code; for gemini, the quota id of a
	// QuotaFailure detail. Empty means none.
	code    string
	param   string // openai only; empty means null
	message string
}

// A rejection is a request the server cannot act on: it names an unknown
// mode or profile or has a malformed header.
type rejection struct {
	typ     string // error type in the plain profile
	culprit string // what the request named; the code in the plain profile
	message string
}

// A call is one request being answered.
type call struct {
	srv      *Server         // the server answering it
	ctx      context.Context // the request's, done when its client goes away
	n        uint64          // sequence number
	mode     string
	profile  *profile
	fault    fault
	mishap   mishap
	wait     int64     // seconds of the wait hint a failure carries, or noHint
	cutAfter int       // stream-cut mode: pieces of text a breaking stream sends, at most len(successChunks)
	text     *textPlan // text mode's delivery; nil in other modes
	req      request   // the request body
	input    int       // the input tokens of req
	tally    tallyID   // what the call is tallied under
	out      output    // the answer text a success serves
	answers  int       // how many answers a success serves, each out's text: 1 unless the request asks for more
	thoughts int       // the thought tokens a success is billed beyond its answers (Gemini's thinking budget)
	// delivered is how many bytes of answer text have gone to the client:
	// the whole text of an answer, or the pieces a stream sent.
	delivered int
}

// noHint is call.wait for a failure that carries no wait hint.
const noHint = -1

// profiles lists every profile, in the order error messages name them.
var profiles = []*profile{plain, openAI, anthropic, gemini, azure, bedrock, local}

func profileNamed(name string) *profile {
	for _, p := range profiles {
		if p.name == name {
			return p
		}
	}
	return nil
}

func unknownProfileError(name string) error {
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = p.name
	}
	return fmt.Errorf("chaos: unknown profile %q (want %s)", name, strings.Join(names, ", "))
}

// status returns the status p answers f with; f is not faultReset.
func (p *profile) status(f fault) int {
	if f == faultNone {
		return http.StatusOK
	}
	return p.errors[f].status
}

// answer writes c's success or failure.
func (c *call) answer(w http.ResponseWriter, r *http.Request) {
	p := c.profile
	h := w.Header()
	c.setID(h)
	if p.limits != nil {
		switch {
		case c.fault == faultNone:
			p.limits(h, false, time.Second)
		case c.mode == ModeRetryAfter:
			p.limits(h, true, time.Duration(c.wait)*time.Second)
		}
	}
	if c.fault == faultNone {
		if maxTokens, ok := c.req.outputCap(); ok {
			c.out.limit(maxTokens)
		}
		p.success(w, r, c)
		return
	}
	if c.wait != noHint && p.hint != nil {
		p.hint(h, c.wait)
	}
	e := p.errors[c.fault]
	if p.errorHeaders != nil {
		p.errorHeaders(h, e)
	}
	writeJSON(w, e.status, p.errorBody(e, c))
}

// reject answers c with rej: in the plain profile in the server's own
// words, in the others as the provider's invalid request. It carries no wait
// hint.
func (c *call) reject(w http.ResponseWriter, rej rejection) {
	p := c.profile
	e := apiError{status: http.StatusBadRequest, typ: rej.typ, code: rej.culprit, message: rej.message}
	if p != plain {
		e = p.errors[faultBadRequest]
		e.message = rej.message
	}
	c.wait = noHint
	c.setID(w.Header())
	if p.errorHeaders != nil {
		p.errorHeaders(w.Header(), e)
	}
	writeJSON(w, e.status, p.errorBody(e, c))
}

// requestID returns the request id the openai and anthropic profiles send.
func (c *call) requestID() string {
	return "req_chaos_" + strconv.FormatUint(c.n, 10)
}

func (c *call) setID(h http.Header) {
	if c.profile.idHeader != "" {
		h.Set(c.profile.idHeader, c.requestID())
	}
}

// What every success outside text mode says, and the pieces a stream sends
// it in.
const successText = "Hello from chaos."

var successChunks = []string{"Hello", " from", " chaos."}

// successEnds are the end offsets of successChunks in successText.
var successEnds = func() []int {
	var ends []int
	n := 0
	for _, piece := range successChunks {
		n += len(piece)
		ends = append(ends, n)
	}
	return ends
}()

// reply returns the text of c's success, whole.
func (c *call) reply() string {
	return c.out.text()
}

// deliver records that the whole text of c's success goes to the client in
// one answer, and returns it.
func (c *call) deliver() string {
	c.delivered = len(c.out.text())
	return c.out.text()
}

// outputTokens returns the output tokens of c's success, whole: its
// answers' and its thoughts.
func (c *call) outputTokens() int {
	return c.answers*tokens(len(c.out.text())) + c.thoughts
}

// finish returns the finish reason of c's success: stopped, or cut short
// by the request's output cap.
func (c *call) finish(stopped, capped string) string {
	if c.out.truncated() {
		return capped
	}
	return stopped
}

// A request is what the server reads from a request body.
type request struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`

	// The conversation (see request.turns) and the system's text.
	Messages          json.RawMessage `json:"messages"`          // chat completions, Anthropic, plain
	Input             json.RawMessage `json:"input"`             // the Responses API
	Contents          json.RawMessage `json:"contents"`          // Gemini
	System            json.RawMessage `json:"system"`            // Anthropic: a string or text blocks
	Instructions      json.RawMessage `json:"instructions"`      // the Responses API
	SystemInstruction json.RawMessage `json:"systemInstruction"` // Gemini: a Content

	asks asks // its output caps, answers, thinking budget and kept context
	size int  // the bytes of the body read
}

// maxBody is how much of a request body readRequest looks at.
const maxBody = 1 << 20

// readRequest reads the JSON body of r, at most maxBody bytes of it. A body
// it cannot read or parse is the zero request; one that is JSON with a
// field of the wrong type has no prompt, but what it asks of the answer
// (see readAsks) stands.
func readRequest(r *http.Request) request {
	var req request
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		return request{}
	}
	if json.Unmarshal(data, &req) != nil {
		req = request{} // a field of the wrong type: the body has no prompt, but may still cap or multiply its answers
	} else {
		req.size = len(data)
	}
	req.asks = readAsks(data)
	return req
}

// object is a JSON object of a success body.
type object = map[string]any

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

// The openai profile.

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
	limits: func(h http.Header, exhausted bool, reset time.Duration) {
		requests, tokens := "499", "29983"
		if exhausted {
			requests = "0"
		}
		h.Set("x-ratelimit-limit-requests", "500")
		h.Set("x-ratelimit-remaining-requests", requests)
		h.Set("x-ratelimit-reset-requests", reset.String())
		h.Set("x-ratelimit-limit-tokens", "30000")
		h.Set("x-ratelimit-remaining-tokens", tokens)
		h.Set("x-ratelimit-reset-tokens", reset.String())
	},
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

// nullable returns nil for "", which encodes as null, and &s otherwise.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
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
	return object{
		"prompt_tokens":             c.input,
		"completion_tokens":         out,
		"total_tokens":              c.input + out,
		"prompt_tokens_details":     object{"cached_tokens": 0},
		"completion_tokens_details": object{"reasoning_tokens": 0},
	}
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
	var usage, incomplete any
	if status != "in_progress" {
		out := c.outputTokens()
		usage = object{
			"input_tokens":          c.input,
			"input_tokens_details":  object{"cached_tokens": 0},
			"output_tokens":         out,
			"output_tokens_details": object{"reasoning_tokens": 0},
			"total_tokens":          c.input + out,
		}
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
		"usage":               usage,
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
	limits: func(h http.Header, exhausted bool, reset time.Duration) {
		requests, tokens := "49", "29983"
		if exhausted {
			requests = "0"
		}
		at := time.Now().Add(reset).UTC().Format(time.RFC3339)
		h.Set("anthropic-ratelimit-requests-limit", "50")
		h.Set("anthropic-ratelimit-requests-remaining", requests)
		h.Set("anthropic-ratelimit-requests-reset", at)
		h.Set("anthropic-ratelimit-tokens-limit", "30000")
		h.Set("anthropic-ratelimit-tokens-remaining", tokens)
		h.Set("anthropic-ratelimit-tokens-reset", at)
	},
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
		"usage": object{
			"input_tokens":                c.input,
			"output_tokens":               output,
			"cache_creation_input_tokens": 0,
			"cache_read_input_tokens":     0,
		},
	}
}

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
		usage := object{
			"promptTokenCount":     c.input,
			"candidatesTokenCount": out - c.thoughts,
			"totalTokenCount":      c.input + out,
		}
		if c.thoughts > 0 {
			usage["thoughtsTokenCount"] = c.thoughts
		}
		resp["usageMetadata"] = usage
	}
	return resp
}
