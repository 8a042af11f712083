package cost

import (
	"encoding/json"
	"testing"

	"github.com/rebound-go/rebound/internal/jsonscan/jsonscantest"
)

// readObjectAsDecoded is how usageBody.readObject read a document before
// the scanner: encoding/json's Unmarshal into usageDoc; but a document
// that gives a field it reads twice, or spells one another way, says
// nothing (jsonscan's rules, which the scanner keeps). The fuzz test
// holds the scanner to it.
func readObjectAsDecoded(b *usageBody, doc []byte) {
	var d usageDoc
	if json.Unmarshal(doc, &d) != nil || jsonscantest.KeyFault(doc, usageFaultNames) {
		return
	}
	var in, out []int64
	for _, c := range []*usageCounts{d.Usage, d.Message.Usage, d.Response.Usage} {
		if c != nil {
			in = append(in, c.PromptTokens, c.InputTokens, c.CacheCreationInputTokens, c.CacheReadInputTokens)
			out = append(out, c.CompletionTokens, c.OutputTokens)
		}
	}
	if m := d.UsageMetadata; m != nil {
		in = append(in, m.PromptTokenCount)
		out = append(out, m.CandidatesTokenCount, m.ThoughtsTokenCount)
	}
	if len(in) == 0 {
		return
	}
	sumIn, okIn := sum(in)
	sumOut, okOut := sum(out)
	if !okIn || !okOut {
		return
	}
	b.usage.InputTokens = max(b.usage.InputTokens, sumIn)
	b.usage.OutputTokens = max(b.usage.OutputTokens, sumOut)
	b.found = true
	finished := false
	for _, c := range d.Candidates {
		finished = finished || c.FinishReason != ""
	}
	b.final = b.final || d.Usage != nil || d.Response.Usage != nil || d.UsageMetadata != nil && finished
}

// usageDocs are documents of every dialect that reports usage, and some
// that bend the rules: the fuzz test's seeds.
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

// FuzzUsageReadsDocumentsAsTheDecoderDid: the scanner's readObject finds
// the usage, and whether it is final, exactly as encoding/json's decoding
// did, for any document.
func FuzzUsageReadsDocumentsAsTheDecoderDid(f *testing.F) {
	for _, d := range usageDocs {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		var got, want usageBody
		got.readObject(doc)
		readObjectAsDecoded(&want, doc)
		if got.usage != want.usage || got.found != want.found || got.final != want.final {
			t.Fatalf("%q: scanner %+v found %v final %v; decoder %+v found %v final %v",
				doc, got.usage, got.found, got.final, want.usage, want.found, want.final)
		}
	})
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

// usageDoc is where the dialects put a response's usage: OpenAI's and
// Anthropic's "usage" (final: the chunk or message_delta that ends a
// stream), Anthropic's message_start "message" (not final), the Responses
// API's events' "response" (final: response.completed), Gemini's
// "usageMetadata" (final in the chunk that finishes a candidate).
type usageDoc struct {
	Usage   *usageCounts `json:"usage"`
	Message struct {
		Usage *usageCounts `json:"usage"`
	} `json:"message"`
	Response struct {
		Usage *usageCounts `json:"usage"`
	} `json:"response"`
	UsageMetadata *struct {
		PromptTokenCount     int64 `json:"promptTokenCount"`
		CandidatesTokenCount int64 `json:"candidatesTokenCount"`
		ThoughtsTokenCount   int64 `json:"thoughtsTokenCount"`
	} `json:"usageMetadata"`
	Candidates []struct {
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
}

// usageCounts are the token counts of OpenAI's Chat Completions (prompt,
// completion) and of the Responses API and Anthropic (input, output, and
// Anthropic's cache writes and reads).
type usageCounts struct {
	PromptTokens             int64 `json:"prompt_tokens"`
	CompletionTokens         int64 `json:"completion_tokens"`
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// usageFaultNames are the names readObject reads, by where they lie:
// "" for the top level, a name and "[]" for an array's elements.
var usageFaultNames = jsonscantest.Paths{
	"":               {"usage", "message", "response", "usageMetadata", "candidates"},
	"message":        {"usage"},
	"response":       {"usage"},
	"usage":          {"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"},
	"message.usage":  {"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"},
	"response.usage": {"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"},
	"usageMetadata":  {"promptTokenCount", "candidatesTokenCount", "thoughtsTokenCount"},
	"candidates[]":   {"finishReason"},
}
