package provider

import (
	"net/http"
	"strconv"
	"strings"
)

// Class is what an error response says about a failure beyond its status.
type Class uint8

// Classes.
const (
	// Unclassified: the response says nothing the status does not.
	Unclassified Class = iota
	// QuotaExhausted: money, credits, a budget or a daily or monthly cap
	// ran out.
	QuotaExhausted
	// ContextOverflow: the request is too large for the model, or for a
	// whole per-minute limit.
	ContextOverflow
	// Overloaded: the provider says it is at capacity.
	Overloaded
	// RateLimited: a limit that passes with a wait.
	RateLimited
	// Transient: a failure that passes by itself, whatever the status.
	Transient
	// Permanent: the error's type says the request is at fault. It does
	// not override a status that says otherwise.
	Permanent
	// Unservable: the server says it cannot serve the request as sent,
	// whatever its status (Ollama's 500 for a model larger than memory).
	Unservable
)

// quotaCodes are the error types and codes that mean money or quota has
// run out: a retry cannot succeed, whatever the status says.
var quotaCodes = set(
	"insufficient_quota", "credit_balance_exhausted", "billing_hard_limit_reached",
	"organization_spend_limit_exceeded", "project_spend_limit_exceeded",
	"organization_usage_limit_exceeded",
	"billing_error", // Anthropic's type
	"enforced_spend_limit_reached",
	"budget_exceeded",              // LiteLLM's gateway
	"exceeded_current_quota_error", // Moonshot
	"Arrearage",                    // DashScope: an account in arrears
)

// quotaWords are the wordings of an exhausted balance.
var quotaWords = []string{
	"credit balance is too low", "spend limit", "insufficient balance",
	"insufficient credits", "insufficient_quota", "out of credits", "credits depleted",
	"credits are depleted", "spending limit", "api usage limits",
	"extra usage is required",  // Anthropic: a plan's gate, not a rate
	"out of call volume quota", // Azure's free tiers
	"budget has been exceeded", // LiteLLM's gateway
	"arrears", "please recharge", "top up your",
	"欠费", "余额不足", "充值", // Chinese providers: in arrears, balance too low, recharge
}

// quotaNoticeWords say a quota was exceeded without saying which: with a
// wait (Gemini's per-minute limits give one) it passes; with none, it is
// the money or the plan.
var quotaNoticeWords = []string{"exceeded your current quota", "exceeded current quota"}

// contextCodes are the error types and codes of a request too large for
// the model.
var contextCodes = set(
	"context_length_exceeded", "request_too_large", // OpenAI, Anthropic
	"exceed_context_size_error", // llama.cpp
	"string_above_max_length",   // OpenAI, a message too long
)

// contextWords are the wordings of a request too large for the model:
// the hosted APIs', then the local servers', which may send them with any
// status, a 500 included. None of them is in a rate limit's wording.
var contextWords = []string{
	"maximum context length", "context length", "context_length", "context window",
	"context size", "context limit", "prompt is too long", "input is too long",
	"too many input tokens", "maximum prompt length", "maximum model length",
	"max_model_len", "reduce the length of the messages",
	"`inputs` tokens + `max_new_tokens`", "`inputs` must have less than", // TGI
	"context the overflows", // LM Studio
	"exceeds the maximum number of tokens allowed",
	"input is too large to process",        // llama.cpp, beyond its batch size
	"max_tokens must be at least 1, got -", // vLLM: the prompt left no room
	"prompt exceeds max length",            // Zhipu
	"range of input length",                // DashScope
	"model token limit",                    // Moonshot
	"expected maxlength:",                  // Bedrock's Titan and Cohere: the input text's length
	"value at 'body' failed to satisfy constraint: member must have length", // Bedrock: the request body
}

// unservableWords say a server cannot serve a request as sent.
var unservableWords = []string{"requires more system memory"}

// overloadedTypes are the error types of a provider at capacity.
var overloadedTypes = set("overloaded_error", "overloaded", "engine_overloaded_error")

// overloadedWords word an overload in a 5xx, Groq's 498 or a stream's
// error event.
var overloadedWords = []string{
	"overloaded", "over capacity", "at capacity", "capacity exceeded",
	"server busy", "maximum pending requests", // Ollama's full queue
	"queue full", "queuefull", "no capacity available", "server is busy",
	"out of capacity", "high demand",
}

// rateWords word a rate limit in messages that also say "too many tokens".
var rateWords = []string{"wait", "per minute", "per second", "rate limit", "processed", "try again"}

// rateLimitCodes are the error types, codes and statuses of a rate limit.
var rateLimitCodes = set(
	"rate_limit_exceeded", "rate_limit_error", "rate_limited", "RESOURCE_EXHAUSTED",
	"ThrottlingException", "TooManyRequestsException",
	"rate_limit_reached_error", "Throttling.RateQuota", "Throttling.AllocationQuota", "Throttling", // Moonshot, DashScope
)

// transientTypes are Bedrock's errors that pass by themselves whatever
// their status says: a model still loading (429) or failing inside (424).
var transientTypes = set("ModelNotReadyException", "ModelErrorException", "ModelTimeoutException",
	"InternalServerException", "ServiceUnavailableException")

// permanentCodes are error types, codes and statuses that no retry will
// change.
var permanentCodes = set(
	"invalid_request_error", "authentication_error", "permission_error", "not_found_error",
	"content_policy_violation", "content_filter", "invalid_api_key", "model_not_found",
	"INVALID_ARGUMENT", "PERMISSION_DENIED", "UNAUTHENTICATED", "NOT_FOUND", "FAILED_PRECONDITION",
	"ValidationException", "AccessDeniedException", "ResourceNotFoundException",
	"UnrecognizedClientException", "ResponsibleAIPolicyViolation",
)

// dailyWords name a limit that resets daily or monthly: waiting seconds
// cannot lift it.
var dailyWords = []string{
	"per day", "per-day", "per_day", "perday", "(tpd)", "(rpd)", " tpd ", " rpd ",
	"/ day", "/day", "a day",
	"daily limit", "daily quota", "daily request", "daily token", "daily usage", "daily cap", "daily rate",
	"per month", "per-month", "/ month", "/month", "a month", "monthly",
}

func set(s ...string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, x := range s {
		m[x] = true
	}
	return m
}

// Class returns what the response says about the failure. status is read
// for wording that means one thing only under some statuses: a 503 that
// says "overloaded", a 429 that names a daily limit.
func (pe *Error) Class(status int) Class {
	msg := strings.ToLower(wording(pe.Message))
	rateLimit := status == http.StatusTooManyRequests || pe.any(rateLimitCodes) ||
		status == 0 && pe.HTTPStatus == http.StatusTooManyRequests
	switch {
	case pe.any(quotaCodes), containsAny(msg, quotaWords):
		return QuotaExhausted
	case outputBeyondLimit(msg):
		// "must be <= 1512. Given: 2 `inputs` tokens and 10000
		// `max_new_tokens`": the parameter is wrong, not the prompt.
	case pe.any(contextCodes), containsAny(msg, contextWords),
		// Bedrock throttles with "Too many tokens, please wait".
		!rateLimit && strings.Contains(msg, "too many tokens") && !containsAny(msg, rateWords),
		strings.Contains(msg, "input token count") && strings.Contains(msg, "exceeds"),
		(rateLimit || status == http.StatusRequestEntityTooLarge) && beyondLimit(msg):
		return ContextOverflow
	case rateLimit && (containsAny(msg, dailyWords) || pe.dailyQuota()),
		containsAny(msg, quotaNoticeWords) && !pe.hasWait() && !pe.perMinuteQuota(),
		pe.Type == "ServiceQuotaExceededException" && containsAny(msg, dailyWords):
		return QuotaExhausted
	case overloadedTypes[pe.Type],
		(status >= 500 || status == 0 || status == 498 || status == http.StatusTooManyRequests) && containsAny(msg, overloadedWords):
		return Overloaded
	case containsAny(msg, unservableWords):
		return Unservable
	case transientTypes[pe.Type]:
		return Transient
	case pe.any(rateLimitCodes), pe.Type == "ServiceQuotaExceededException":
		return RateLimited
	case pe.any(permanentCodes) || permanentCodes[pe.InnerCode]:
		return Permanent
	}
	return Unclassified
}

// maxWording is how much of a message is read for its wording: a
// provider's message is a sentence or two; 64 KiB of one, read some sixty
// times over, would only slow down a hostile server's victim.
const maxWording = 16 << 10

// wording is the part of a message that is read for its wording.
func wording(msg string) string { return msg[:min(len(msg), maxWording)] }

// any reports whether the error's type, code or status is in codes.
func (pe *Error) any(codes map[string]bool) bool {
	return codes[pe.Type] || codes[pe.Code] || codes[pe.Status] || codes[pe.ErrorCode]
}

func containsAny(s string, words []string) bool {
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// dailyQuota reports whether a Google error names a per-day quota: it
// will not come back in seconds, so it is quota exhaustion, not a rate
// limit.
func (pe *Error) dailyQuota() bool {
	for _, id := range pe.QuotaIDs {
		if containsAny(strings.ToLower(id), dailyWords) {
			return true
		}
	}
	return false
}

// hasWait reports whether the response says when to try again.
func (pe *Error) hasWait() bool {
	_, ok := pe.Wait()
	return ok || pe.headerWait
}

// perMinuteQuota reports whether a Google error names a per-minute quota.
func (pe *Error) perMinuteQuota() bool {
	for _, id := range pe.QuotaIDs {
		if id := strings.ToLower(id); strings.Contains(id, "perminute") || strings.Contains(id, "per_minute") {
			return true
		}
	}
	return false
}

// beyondLimit reports whether a rate limit's message says the request
// alone asks for more than the whole limit ("on tokens per min (TPM):
// Limit 30000, Requested 45000"): no wait can make it fit; only a smaller
// request can.
func beyondLimit(msg string) bool {
	limit, ok := numberAfter(msg, "limit")
	if !ok {
		return false
	}
	requested, ok := numberAfter(msg, "requested")
	return ok && requested > limit
}

// outputBeyondLimit reports whether a message says the output asked for
// alone exceeds the model's limit: TGI's "must be <= 1512. Given: 2
// `inputs` tokens and 10000 `max_new_tokens`", vLLM's "'max_tokens' ... is
// too large: 8000. This model's maximum context length is 4096 tokens".
func outputBeyondLimit(msg string) bool {
	if limit, ok := numberAfter(msg, "must be <="); ok {
		output, ok := numberAfter(msg, "`inputs` tokens and")
		return ok && output >= limit
	}
	if output, ok := numberAfter(msg, "is too large:"); ok {
		limit, ok := numberAfter(msg, "maximum context length is")
		return ok && output >= limit
	}
	return false
}

// numberAfter returns the number that follows the first "word" in msg,
// past spaces and a colon ("limit 6000", "limit: 6,000").
func numberAfter(msg, word string) (int64, bool) {
	for rest := msg; ; {
		i := strings.Index(rest, word)
		if i < 0 {
			return 0, false
		}
		rest = strings.TrimLeft(rest[i+len(word):], " :~") // Groq: "Requested ~12903"
		end := 0
		for end < len(rest) && end < 24 && (rest[end] >= '0' && rest[end] <= '9' || rest[end] == ',' && end > 0) {
			end++
		}
		if n, err := strconv.ParseInt(strings.ReplaceAll(strings.TrimRight(rest[:end], ","), ",", ""), 10, 64); err == nil {
			return n, true
		}
	}
}
