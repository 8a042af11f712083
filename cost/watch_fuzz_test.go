package cost

import "testing"

// usageDocs are documents of every dialect that reports usage, and some
// that bend the rules: read without an allocation.
var usageDocs = []string{
	`{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`,
	`{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}`,
	`{"type":"message_start","message":{"id":"m","usage":{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":4,"output_tokens":1}}}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`,
	`{"type":"response.completed","response":{"id":"r","status":"completed","usage":{"input_tokens":5,"output_tokens":7}}}`,
	`{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2,"thoughtsTokenCount":1}}`,
	`{"candidates":[{"content":{"parts":[{"text":"hi"}]}}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2}}`,
	`{"candidates":[{"finishReason":""},{"finishReason":"STOP"}],"candidates":[{"FinishReason":null}],"usageMetadata":{"promptTokenCount":1}}`,
	`{"usage":{"prompt_tokens":1},"usage":null,"USAGE":{"completion_tokens":2},"uſage":{"prompt_tokens":3}}`,
	`{"usage":{"prompt_tokens":1.0}}`,
	`{"usage":{"prompt_tokens":-9223372036854775808,"completion_tokens":9223372036854775807}}`,
	`{"usage":{"prompt_tokens":"9"}}`,
	`{"us\u0061ge":{"cache_read_input_tokens":7},"message":null,"response":[]}`,
	`{"usageMetadata":{"promptTokenCount":3},"candidates":null,"candidates":[{"finishReason":"x"}]}`,
	`{"candidates":[null,{"finishReason":"\u0000"}],"usageMetadata":{}}`,
	`null`, `[]`, `"usage"`, `{"usage":{}`, `{"usage":{}} x`,
}

// TestUsageReadAllocatesNothing: a usage event of any dialect is read
// without an allocation.
func TestUsageReadAllocatesNothing(t *testing.T) {
	for _, d := range usageDocs[:7] {
		doc := []byte(d)
		var b usageBody
		if n := testing.AllocsPerRun(100, func() { b.readObject(doc) }); n != 0 {
			t.Errorf("%s: %v allocations", d, n)
		}
	}
}

// TestWatchUsageKeepsTheLargestOfEachKind: a stream's events report
// cumulative counts, each kind of token in its own event or several: the
// attempt's usage is the largest of each kind, and final once an event
// says so.
func TestWatchUsageKeepsTheLargestOfEachKind(t *testing.T) {
	var b usageBody
	for _, ev := range []string{
		`{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":2000,"cache_read_input_tokens":90000,"output_tokens":1}}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":500}}`,
	} {
		b.readObject([]byte(ev))
	}
	want := Usage{InputTokens: 10, CacheReadTokens: 90000, CacheWriteTokens: 2000, OutputTokens: 500}
	if b.usage != want || !b.found || !b.final {
		t.Errorf("%+v found %v final %v, want %+v final", b.usage, b.found, b.final, want)
	}
}
