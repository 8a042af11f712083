package chaos

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// usageHolders returns, in order, the usage objects an answer reports,
// byte for byte as sent, each named by its path: "usage",
// "usageMetadata", "message.usage" or "response.usage", in the body or in
// each of its stream's events.
func usageHolders(t *testing.T, rec *httptest.ResponseRecorder) []string {
	t.Helper()
	docs := []string{rec.Body.String()}
	if rec.Header().Get("Content-Type") == "text/event-stream" {
		docs = nil
		for _, e := range readStream(t, rec) {
			if e.data != "[DONE]" {
				docs = append(docs, e.data)
			}
		}
	}
	var out []string
	for _, doc := range docs {
		var top map[string]json.RawMessage
		decode(t, []byte(doc), &top)
		for _, name := range []string{"usage", "usageMetadata"} {
			if v, ok := top[name]; ok && string(v) != "null" {
				out = append(out, name+" "+string(v))
			}
		}
		for _, name := range []string{"message", "response"} {
			var inner struct{ Usage json.RawMessage }
			if v, ok := top[name]; ok && json.Unmarshal(v, &inner) == nil && inner.Usage != nil && string(inner.Usage) != "null" {
				out = append(out, name+".usage "+string(inner.Usage))
			}
		}
	}
	return out
}

// Without the prompt cache, the usage an answer reports is what it was
// before there was one, byte for byte, but for Anthropic's split of the
// tokens written into the cache by their time to live, zero, which its API
// sends.
func TestUsageWithoutPromptCacheIsAsBefore(t *testing.T) {
	want := map[string]string{
		"openai chat":             `usage {"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":0},"prompt_tokens":6,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":11}`,
		"openai chat stream":      `usage {"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":0},"prompt_tokens":6,"prompt_tokens_details":{"cached_tokens":0},"total_tokens":11}`,
		"openai responses":        `usage {"input_tokens":6,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":11}`,
		"openai responses stream": `response.usage {"input_tokens":6,"input_tokens_details":{"cached_tokens":0},"output_tokens":5,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":11}`,
		"anthropic":               `usage {"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":6,"output_tokens":5}`,
		"anthropic stream": `message.usage {"cache_creation":{"ephemeral_1h_input_tokens":0,"ephemeral_5m_input_tokens":0},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":6,"output_tokens":1}` + "\n" +
			`usage {"output_tokens":5}`,
		"gemini":        `usageMetadata {"candidatesTokenCount":5,"promptTokenCount":6,"totalTokenCount":11}`,
		"gemini stream": `usageMetadata {"candidatesTokenCount":5,"promptTokenCount":6,"totalTokenCount":11}`,
		"bedrock":       `usage {"inputTokens":6,"outputTokens":5,"totalTokens":11}`,
	}
	for _, p := range personalities {
		s := newServer(t, Config{Mode: ModeOK, Profile: p.profile})
		rec := send(s, "POST", p.path, p.request())
		if got := strings.Join(usageHolders(t, rec), "\n"); got != want[p.name] {
			t.Errorf("%s:\n%s\nwant\n%s", p.name, got, want[p.name])
		}
	}
	// Gemini's thoughts are reported apart, and only if there are any.
	s := newServer(t, Config{Mode: ModeOK, Profile: ProfileGemini})
	rec := send(s, "POST", "/v1beta/models/g:generateContent", `{"generationConfig":{"thinkingConfig":{"thinkingBudget":7}},"contents":[{"parts":[{"text":"12345678"}]}]}`)
	if got, w := strings.Join(usageHolders(t, rec), "\n"), `usageMetadata {"candidatesTokenCount":5,"promptTokenCount":2,"thoughtsTokenCount":7,"totalTokenCount":14}`; got != w {
		t.Errorf("gemini with thoughts:\n%s\nwant\n%s", got, w)
	}
}
