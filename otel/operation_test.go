package reboundotel_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/rebound-go/rebound/observe"
)

// TestOperationsUnderTheConventionsNames: a model call is recorded in
// gen_ai.client.operation.duration and gen_ai.client.token.usage, a tool
// call in mcp.client.operation.duration, with the conventions' attributes
// and error.type for a failure only.
func TestOperationsUnderTheConventionsNames(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	var _ observe.OperationRecorder = h.obs
	h.obs.RecordOperation(ctx, observe.Operation{Kind: "llm", Provider: "openai", Model: "gpt-4o", Duration: 1500 * time.Millisecond, InputTokens: 900, OutputTokens: 40})
	h.obs.RecordOperation(ctx, observe.Operation{Kind: "llm", Provider: "openai", Model: "gpt-4o", Duration: 3 * time.Second, ErrorType: "503"})
	h.obs.RecordOperation(ctx, observe.Operation{Kind: "mcp", Method: "tools/call", Tool: "create", Duration: 20 * time.Millisecond})
	h.obs.RecordOperation(ctx, observe.Operation{Kind: "other", Duration: time.Second})
	ms := h.metrics(t)
	chat := []attribute.KeyValue{attribute.String("gen_ai.operation.name", "chat"), attribute.String("gen_ai.provider.name", "openai"), attribute.String("gen_ai.request.model", "gpt-4o")}
	if p := mustValue(t, ms, "gen_ai.client.operation.duration", chat...); p.count != 1 || p.value != 1.5 {
		t.Errorf("the answered call: %d recorded, %v s; want 1, 1.5", p.count, p.value)
	}
	if p := mustValue(t, ms, "gen_ai.client.operation.duration", append(chat, attribute.String("error.type", "503"))...); p.count != 1 || p.value != 3 {
		t.Errorf("the failed call: %d recorded, %v s; want 1, 3", p.count, p.value)
	}
	for typ, n := range map[string]float64{"input": 900, "output": 40} {
		if p := mustValue(t, ms, "gen_ai.client.token.usage", append(chat, attribute.String("gen_ai.token.type", typ))...); p.value != n {
			t.Errorf("%s tokens %v, want %v", typ, p.value, n)
		}
	}
	if p := mustValue(t, ms, "mcp.client.operation.duration", attribute.String("mcp.method.name", "tools/call"), attribute.String("gen_ai.tool.name", "create")); p.count != 1 {
		t.Errorf("the tool call: %d recorded, want 1", p.count)
	}
	if m := ms["gen_ai.client.operation.duration"]; m.Unit != "s" {
		t.Errorf("unit %q, want s", m.Unit)
	}
}
