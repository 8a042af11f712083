package observe

import (
	"context"
	"time"
)

// An Operation is one call a client made, as OpenTelemetry's semantic
// conventions for generative AI and MCP clients count one: a model call
// (Kind "llm": its provider, model and tokens) or a call to an MCP server
// (Kind "mcp": its method and tool). rebound proxy gives one per request to
// its Observer when that is an OperationRecorder, as reboundmcp gives one
// per client request; reboundotel's Observer records them under the
// conventions' names (gen_ai.client.operation.duration,
// gen_ai.client.token.usage, mcp.client.operation.duration).
type Operation struct {
	// Kind is "llm" or "mcp".
	Kind string
	// Provider is gen_ai.provider.name: "openai", "anthropic",
	// "gcp.gemini", "aws.bedrock", "azure.ai.openai".
	Provider string
	// Model is gen_ai.request.model, as the client named it.
	Model string
	// Method is mcp.method.name ("tools/call"), Tool gen_ai.tool.name.
	Method, Tool string
	// Duration is the call's, from its request to its answer's end.
	Duration time.Duration
	// Attempts is how many times the call was sent (to a model's
	// upstreams, or to the MCP server, again after a restart): 1 for one
	// answered by its first attempt, more for one that needed others, 0
	// for one that never reached anyone (a breaker's refusal, a server
	// that could not be started).
	Attempts int
	// ErrorType is error.type: the status of a failed answer ("503"), or
	// what went wrong ("timeout", "gave_up"); "" for a success.
	ErrorType string
	// InputTokens and OutputTokens are what the answer reported (every
	// input token, the cache's included); zero when it reported none.
	InputTokens, OutputTokens int64
}

// An OperationRecorder records Operations; reboundotel's Observer is one.
type OperationRecorder interface {
	RecordOperation(ctx context.Context, op Operation)
}
