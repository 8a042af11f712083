package reboundotel

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rebound-go/rebound/observe"
)

// The buckets the GenAI semantic conventions advise for the duration of
// an operation, in seconds, and for a count of tokens.
var (
	genaiDurationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	genaiTokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// RecordOperation records op under OpenTelemetry's semantic conventions
// for generative AI and MCP clients: a model call ("llm") in
// gen_ai.client.operation.duration and, for each of its input and output
// counts, gen_ai.client.token.usage, with gen_ai.operation.name "chat",
// gen_ai.provider.name, gen_ai.request.model and, for a failure,
// error.type; a call to an MCP server ("mcp") in
// mcp.client.operation.duration with mcp.method.name, gen_ai.tool.name
// and error.type. rebound proxy and reboundmcp call it once per request
// (observe.OperationRecorder). An Operation of another kind is ignored.
func (o *Observer) RecordOperation(ctx context.Context, op observe.Operation) {
	attrs := make([]attribute.KeyValue, 0, 5)
	switch op.Kind {
	case "llm":
		attrs = append(attrs, attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", op.Provider))
		if op.Model != "" {
			attrs = append(attrs, attribute.String("gen_ai.request.model", op.Model))
		}
		if op.ErrorType != "" {
			attrs = append(attrs, attribute.String("error.type", op.ErrorType))
		}
		o.genaiDuration.Record(ctx, op.Duration.Seconds(), metric.WithAttributes(attrs...))
		attrs = attrs[:len(attrs):len(attrs)] // the token types below go on a copy
		for _, t := range []struct {
			typ string
			n   int64
		}{{"input", op.InputTokens}, {"output", op.OutputTokens}} {
			if t.n > 0 {
				o.genaiTokens.Record(ctx, t.n, metric.WithAttributes(append(attrs, attribute.String("gen_ai.token.type", t.typ))...))
			}
		}
	case "mcp":
		attrs = append(attrs, attribute.String("mcp.method.name", op.Method))
		if op.Tool != "" {
			attrs = append(attrs, attribute.String("gen_ai.tool.name", op.Tool))
		}
		if op.ErrorType != "" {
			attrs = append(attrs, attribute.String("error.type", op.ErrorType))
		}
		o.mcpDuration.Record(ctx, op.Duration.Seconds(), metric.WithAttributes(attrs...))
	}
}
