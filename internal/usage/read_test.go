package usage

import (
	"encoding/json"
	"testing"
)

// TestReadEachDialect: the usage of each provider's answers and events,
// as their APIs report it, read into counts billed apart.
func TestReadEachDialect(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		want      Counts
		final     bool
	}{
		{"openai chat", `{"id":"c","choices":[],"usage":{"prompt_tokens":92010,"completion_tokens":300,"total_tokens":92310,"prompt_tokens_details":{"cached_tokens":90000,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`,
			Counts{Input: 2010, CacheRead: 90000, Output: 300}, true},
		{"openai chat, no details", `{"usage":{"prompt_tokens":9,"completion_tokens":3}}`, Counts{Input: 9, Output: 3}, true},
		{"openai chat stream, no usage yet", `{"choices":[{"delta":{"content":"x"}}],"usage":null}`, Counts{}, false},
		{"openai responses", `{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":92010,"input_tokens_details":{"cached_tokens":90000},"output_tokens":300,"output_tokens_details":{"reasoning_tokens":100},"total_tokens":92310}}}`,
			Counts{Input: 2010, CacheRead: 90000, Output: 300}, true},
		{"anthropic message", `{"id":"m","type":"message","usage":{"input_tokens":10,"cache_creation_input_tokens":2000,"cache_read_input_tokens":90000,"output_tokens":500}}`,
			Counts{Input: 10, CacheRead: 90000, CacheWrite: 2000, Output: 500}, true},
		{"anthropic, by time to live", `{"usage":{"input_tokens":10,"cache_creation_input_tokens":3000,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":5}}`,
			Counts{Input: 10, CacheWrite: 1000, CacheWrite1h: 2000, Output: 5}, true},
		{"anthropic message_start", `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":10,"cache_creation_input_tokens":2000,"cache_read_input_tokens":90000,"output_tokens":1}}}`,
			Counts{Input: 10, CacheRead: 90000, CacheWrite: 2000, Output: 1}, false},
		{"anthropic message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":500}}`, Counts{Output: 500}, true},
		{"bedrock converse", `{"output":{},"stopReason":"end_turn","usage":{"inputTokens":10,"outputTokens":500,"totalTokens":92510,"cacheReadInputTokens":90000,"cacheWriteInputTokens":2000}}`,
			Counts{Input: 10, CacheRead: 90000, CacheWrite: 2000, Output: 500}, true},
		{"gemini finished", `{"candidates":[{"content":{"parts":[{"text":"hi"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":92010,"candidatesTokenCount":250,"thoughtsTokenCount":50,"cachedContentTokenCount":90000}}`,
			Counts{Input: 2010, CacheRead: 90000, Output: 300}, true},
		{"gemini growing", `{"candidates":[{"content":{"parts":[{"text":"hi"}]}}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2}}`,
			Counts{Input: 4, Output: 2}, false},
	} {
		r, ok := Read([]byte(c.doc))
		if c.want == (Counts{}) {
			if ok {
				t.Errorf("%s: read %+v, want no usage", c.name, r)
			}
			continue
		}
		if !ok || r.Counts != c.want || r.Final != c.final {
			t.Errorf("%s: %+v final %v (ok %v), want %+v final %v", c.name, r.Counts, r.Final, ok, c.want, c.final)
		}
	}
}

// TestReadRefusesWhatCannotBeTold: a document whose usage readers would
// read differently, or that contradicts itself, says nothing.
func TestReadRefusesWhatCannotBeTold(t *testing.T) {
	for _, doc := range []string{
		`{"usage":{"prompt_tokens":9,"prompt_tokens":1}}`,
		`{"usage":{"prompt_tokens":9,"Prompt_Tokens":1}}`,
		`{"usage":{"prompt_tokens":9},"Usage":{"prompt_tokens":1}}`,
		`{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":9}}}`,
		`{"usage":{"input_tokens":-1}}`,
		`{"usage":{"input_tokens":1.5}}`,
		`{"usage":{"input_tokens":"9"}}`,
		`{"usage":{"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":10}}}`,
		`{"usage":{"prompt_tokens":9223372036854775807,"completion_tokens":9223372036854775807}}`,
		`{"usage":{"prompt_tokens":9}`,
		`{"usage":5}`,
		`[{"usage":{"prompt_tokens":9}}]`,
	} {
		if r, ok := Read([]byte(doc)); ok {
			t.Errorf("%s: read %+v, want nothing", doc, r)
		}
	}
}

// TestObjectReadsBack: what a dialect writes for counts, Read reads as
// those counts (a count the dialect has no member for folded into input).
func TestObjectReadsBack(t *testing.T) {
	c := Counts{Input: 10, CacheRead: 90000, CacheWrite: 1000, CacheWrite1h: 2000, Output: 500}
	for _, d := range Dialects {
		holder := d.Holders[0]
		doc := jsonOf(t, map[string]any{holder: d.Object(c)})
		if holder == "usageMetadata" {
			doc = jsonOf(t, map[string]any{holder: d.Object(c), "candidates": []any{map[string]any{"finishReason": "STOP"}}})
		}
		r, ok := Read(doc)
		want := c
		if d.CacheWrite == "" {
			want.Input, want.CacheWrite, want.CacheWrite1h = c.Input+c.CacheWrite+c.CacheWrite1h, 0, 0
		}
		if d.CacheWrite1h == "" && d.CacheWrite != "" {
			want.CacheWrite, want.CacheWrite1h = c.CacheWrite+c.CacheWrite1h, 0
		}
		if !ok || r.Counts != want || !r.Final {
			t.Errorf("%s: %s read as %+v (%v), want %+v", d.Name, doc, r.Counts, ok, want)
		}
	}
}

func TestReadAllocatesNothing(t *testing.T) {
	doc := []byte(`{"usage":{"input_tokens":10,"cache_creation_input_tokens":3000,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":1000,"ephemeral_1h_input_tokens":2000},"output_tokens":5}}`)
	if n := testing.AllocsPerRun(100, func() { Read(doc) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}

func jsonOf(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
