package cost

import (
	"bytes"
	"io"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
)

// Paths of each dialect.
const (
	chatPath      = "/v1/chat/completions"
	responsesPath = "/v1/responses"
	messagesPath  = "/v1/messages"
	geminiPath    = "/v1beta/models/gem:generateContent"
)

// estimatePrice holds a request that names no output cap at 1000 tokens
// an answer, and kept context at the dialect's window.
var estimatePrice = Price{InputPerMillion: 1, OutputPerMillion: 1, MaxOutputTokens: 1000}

// heldAt returns what Transport holds a request of body to path at,
// under estimatePrice.
func heldAt(t testing.TB, path, body string) Usage {
	req, _ := http.NewRequest("POST", "http://provider.test"+path, strings.NewReader(body))
	return read(t, req).most(estimatePrice)
}

// read returns what req may use.
func read(t testing.TB, req *http.Request) request {
	t.Helper()
	r, err := readRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// in returns the input tokens of body alone: a token per 4 bytes.
func in(body string) int64 { return int64(len(body)+3) / 4 }

type estimateCase struct {
	name, path, body string
	out              int64 // the output tokens held
	kept             int64 // the tokens of kept context held beyond the body
}

func checkEstimates(t *testing.T, cases []estimateCase) {
	t.Helper()
	for _, c := range cases {
		got := heldAt(t, c.path, c.body)
		if want := (Usage{InputTokens: in(c.body) + c.kept, OutputTokens: c.out}); got != want {
			t.Errorf("%s: %s to %s is held at %+v, want %+v", c.name, c.body, c.path, got, want)
		}
	}
}

// TestEstimateTakesTheLargestOutputCap: whatever field names an output
// cap, in any case, spelling or repetition, the largest is held; a cap
// lowers the estimate below the default only from the dialect's own
// field, exactly spelt, at its place, as a positive number, in a body
// that is JSON throughout.
func TestEstimateTakesTheLargestOutputCap(t *testing.T) {
	checkEstimates(t, []estimateCase{
		{"own cap", chatPath, `{"max_tokens":10}`, 10, 0},
		{"both caps", chatPath, `{"max_tokens":10,"max_completion_tokens":5000}`, 5000, 0},
		{"both caps, the larger first", chatPath, `{"max_completion_tokens":5000,"max_tokens":10}`, 5000, 0},
		{"named twice", chatPath, `{"max_tokens":5000,"max_tokens":10}`, 5000, 0},
		{"case variant", chatPath, `{"MAX_TOKENS":5000,"max_tokens":10}`, 5000, 0},
		{"Kelvin sign", chatPath, `{"max_to\u212aens":5000,"max_tokens":10}`, 5000, 0},
		{"escaped key", chatPath, `{"max\u005ftokens":10}`, 10, 0},
		{"case variant alone", chatPath, `{"Max_Tokens":10}`, 1000, 0},
		{"unknown cap alone", chatPath, `{"max_new_tokens":10}`, 1000, 0},
		{"unknown cap, larger", chatPath, `{"max_tokens":10,"max_new_tokens":5000}`, 5000, 0},
		{"nested unknown cap", chatPath, `{"max_tokens":10,"extra_body":{"options":{"num_predict":5000}}}`, 5000, 0},
		{"a cap in a message is none", chatPath, `{"max_tokens":10,"messages":[{"role":"tool","content":{"max_tokens":5000}}]}`, 10, 0},
		{"zero", chatPath, `{"max_tokens":0}`, 1000, 0},
		{"negative", chatPath, `{"max_tokens":10,"max_completion_tokens":-1}`, 1000, 0},
		{"unknown negative", chatPath, `{"max_tokens":10,"options":{"num_predict":-1}}`, 1000, 0},
		{"a string", chatPath, `{"max_tokens":"10"}`, 1000, 0},
		{"a string, larger", chatPath, `{"max_tokens":10,"max_completion_tokens":" 5_000 "}`, 5000, 0},
		{"true", chatPath, `{"max_tokens":true}`, 1000, 0},
		{"null", chatPath, `{"max_tokens":null,"max_completion_tokens":10}`, 10, 0},
		{"fraction", chatPath, `{"max_tokens":9.2}`, 10, 0},
		{"huge", chatPath, `{"max_tokens":1e999}`, maxFigure, 0},
		{"not JSON throughout", chatPath, `{"max_tokens":10} trailing`, 1000, 0},
		{"a second document", chatPath, `{"max_tokens":10}{"max_tokens":5000}`, 5000, 0},
		{"a body that is an array", chatPath, `[{"max_tokens":10}]`, 1000, 0},
		{"Responses", responsesPath, `{"max_output_tokens":10}`, 10, 0},
		{"Anthropic, thinking within", messagesPath, `{"max_tokens":2000,"thinking":{"type":"enabled","budget_tokens":1500}}`, 2000, 0},
		{"OpenAI reasoning within", responsesPath, `{"max_output_tokens":10,"reasoning":{"effort":"high"}}`, 10, 0},
		{"Gemini's cap elsewhere is not its own", chatPath, `{"generationConfig":{"maxOutputTokens":10}}`, 1000, 0},
		{"OpenAI's cap in Gemini is not its own", geminiPath, `{"max_tokens":10,"generationConfig":{"thinkingConfig":{"thinkingBudget":0}}}`, 1000, 0},
		{"Gemini", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}}}`, 10, 0},
		{"Gemini, snake_case", geminiPath, `{"generation_config":{"max_output_tokens":10,"thinking_config":{"thinking_budget":0}}}`, 10, 0},
		{"Gemini, both spellings", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"max_output_tokens":5000,"thinkingConfig":{"thinkingBudget":0}}}`, 5000, 0},
		{"Gemini, both objects", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}},"generation_config":{"max_output_tokens":5000}}`, 5000, 0},
		{"Gemini, a case variant alone", geminiPath, `{"GenerationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}}}`, 1000 + 1000, 0}, // thoughts too
		{"an unknown path reads either", "/v2/generate", `{"generationConfig":{"maxOutputTokens":10}}`, 10, 0},
		{"an unknown path reads any top cap", "/v2/generate", `{"max_output_tokens":10}`, 10, 0},
		{"the Responses API's cap in a chat", chatPath, `{"max_output_tokens":10}`, 1000, 0},
		{"a chat's cap in the Responses API", responsesPath, `{"max_tokens":10}`, 1000, 0},
		{"a chat's new cap in Anthropic", messagesPath, `{"max_completion_tokens":10}`, 1000, 0},
		{"legacy completions", "/v1/completions", `{"max_tokens":10}`, 10, 0},
		{"Anthropic on Vertex is not Gemini", "/v1/projects/p/locations/l/publishers/anthropic/models/claude:rawPredict", `{"anthropic_version":"vertex-2023-10-16","max_tokens":10}`, 10, 0},
		{"Gemini on Vertex", "/v1/projects/p/locations/l/publishers/google/models/gem:streamGenerateContent", `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}}}`, 10, 0},
		{"a predicted output", chatPath, `{"max_tokens":10,"prediction":{"type":"content","content":"` + strings.Repeat("x", 400) + `"}}`, 10 + 108, 0}, // its 431 bytes
	})
}

// TestEstimateCountsEveryAnswer: every count of answers a server might
// honour multiplies the output held.
func TestEstimateCountsEveryAnswer(t *testing.T) {
	checkEstimates(t, []estimateCase{
		{"n", chatPath, `{"max_tokens":10,"n":3}`, 30, 0},
		{"N", chatPath, `{"max_tokens":10,"N":3}`, 30, 0},
		{"n as a string", chatPath, `{"max_tokens":10,"n":"3"}`, 30, 0},
		{"best_of", "/v1/completions", `{"max_tokens":10,"n":2,"best_of":5}`, 50, 0},
		{"n, no cap", chatPath, `{"n":3}`, 3000, 0},
		{"n bounded", chatPath, `{"max_tokens":10,"n":1e9}`, 10 * maxAnswers, 0},
		{"n of none", chatPath, `{"max_tokens":10,"n":0}`, 10, 0},
		{"candidateCount", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"candidateCount":4,"thinkingConfig":{"thinkingBudget":0}}}`, 40, 0},
		{"candidate_count", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"candidate_count":4,"thinkingConfig":{"thinkingBudget":0}}}`, 40, 0},
		{"generation_config's candidate_count", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}},"generation_config":{"candidate_count":4}}`, 40, 0},
		{"an unknown count", "/predict", `{"max_tokens":10,"parameters":{"sampleCount":4}}`, 40, 0},
		{"any count", chatPath, `{"max_tokens":10,"extra":{"choiceCount":4}}`, 40, 0},
		{"a count in a message is none", chatPath, `{"max_tokens":10,"messages":[{"role":"user","content":{"n":4}}]}`, 10, 0},
	})
}

// TestEstimateHoldsGeminiThoughtsBeyondItsCap: Gemini's documentation
// counts thoughts apart from maxOutputTokens, so a Gemini request is held
// at its thinking budget beyond its cap, and at the default output when
// it sets none (thinking models think by default); elsewhere a thinking
// budget raises the estimate only.
func TestEstimateHoldsGeminiThoughtsBeyondItsCap(t *testing.T) {
	checkEstimates(t, []estimateCase{
		{"budget", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":500}}}`, 510, 0},
		{"snake_case budget", geminiPath, `{"generation_config":{"max_output_tokens":10,"thinking_config":{"thinking_budget":500}}}`, 510, 0},
		{"no budget", geminiPath, `{"generationConfig":{"maxOutputTokens":10}}`, 1010, 0},
		{"dynamic", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":-1}}}`, 1010, 0},
		{"a level", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingLevel":"low"}}}`, 1010, 0},
		{"off, in a case variant", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"ThinkingBudget":0}}}`, 1010, 0},
		{"budget per candidate", geminiPath, `{"generationConfig":{"maxOutputTokens":10,"candidateCount":2,"thinkingConfig":{"thinkingBudget":500}}}`, 1020, 0},
		{"Gemini's budget through OpenAI's API", chatPath, `{"max_tokens":10,"extra_body":{"google":{"thinking_config":{"thinking_budget":500}}}}`, 510, 0},
	})
}

// TestEstimateHoldsKeptContextAtTheWindow: a request that refers to
// context the provider keeps, whose size its body does not show, is held
// at the model's context window beyond its body: by default the largest
// its dialect's provider serves.
func TestEstimateHoldsKeptContextAtTheWindow(t *testing.T) {
	checkEstimates(t, []estimateCase{
		{"previous_response_id", responsesPath, `{"max_output_tokens":10,"previous_response_id":"resp_1"}`, 10, openAIWindow},
		{"conversation", responsesPath, `{"max_output_tokens":10,"conversation":"conv_1"}`, 10, openAIWindow},
		{"a stored prompt", responsesPath, `{"max_output_tokens":10,"prompt":{"id":"pmpt_1"}}`, 10, openAIWindow},
		{"a file by id", responsesPath, `{"max_output_tokens":10,"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}`, 10, openAIWindow},
		{"an item of a stored response", responsesPath, `{"max_output_tokens":10,"input":[{"type":"item_reference","id":"msg_1"}]}`, 10, openAIWindow},
		{"a thread", "/v1/threads/thread_1/runs", `{"max_completion_tokens":10,"assistant_id":"asst_1"}`, 10, otherWindow},
		{"provider tools", responsesPath, `{"max_output_tokens":10,"tools":[{"type":"web_search"}]}`, 10, openAIWindow},
		{"cachedContent", geminiPath, `{"cachedContent":"cachedContents/c","generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}}}`, 10, geminiWindow},
		{"cached_content", geminiPath, `{"cached_content":"cachedContents/c","generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}}}`, 10, geminiWindow},
		{"a file by URI", geminiPath, `{"contents":[{"parts":[{"file_data":{"file_uri":"gs://b/f.pdf"}}]}],"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}}}`, 10, geminiWindow},
		{"Google Search", geminiPath, `{"tools":[{"googleSearch":{}}],"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}}}`, 10, geminiWindow},
		{"a document", messagesPath, `{"max_tokens":10,"messages":[{"role":"user","content":[{"type":"document","source":{"type":"url","url":"https://x.test/a.pdf"}}]}]}`, 10, anthropicWindow},
		{"a container", messagesPath, `{"max_tokens":10,"container":"container_1"}`, 10, anthropicWindow},
		{"MCP servers", messagesPath, `{"max_tokens":10,"mcp_servers":[{"type":"url","url":"https://mcp.test"}]}`, 10, anthropicWindow},
		{"a path of no known dialect", "/anthropic/v1/chat", `{"max_tokens":10,"container":"container_1"}`, 10, otherWindow},
		{"none: null", responsesPath, `{"max_output_tokens":10,"previous_response_id":null,"conversation":""}`, 10, 0},
		{"none: a prompt's text", "/v1/completions", `{"max_tokens":10,"prompt":"Say hi"}`, 10, 0},
		{"none: a function named after a provider tool", chatPath, `{"max_tokens":10,"tools":[{"type":"function","function":{"name":"web_search"}}]}`, 10, 0},
		{"none: a function's parameter named file_id", chatPath, `{"max_tokens":10,"tools":[{"type":"function","function":{"name":"read","parameters":{"type":"object","properties":{"file_id":{"type":"string"},"web_search":{"type":"boolean"}}}}}]}`, 10, 0},
		{"none: a schema's property named conversation", responsesPath, `{"max_output_tokens":10,"text":{"format":{"type":"json_schema","schema":{"properties":{"conversation":{"type":"string"}}}}}}`, 10, 0},
		{"none: a tool's result that lists files", geminiPath, `{"contents":[{"role":"user","parts":[{"functionResponse":{"name":"ls","response":{"files":[{"type":"file","file_id":"f1","container":"c"}]}}}]}],"generationConfig":{"maxOutputTokens":10,"thinkingConfig":{"thinkingBudget":0}}}`, 10, 0},
		{"none: a tool call's arguments", messagesPath, `{"max_tokens":10,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"open","input":{"type":"document","file_id":"f1"}}]}]}`, 10, 0},
		{"none: Anthropic's cache_control, in the body", messagesPath, `{"max_tokens":10,"system":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}]}`, 10, 0},
	})
	req, _ := http.NewRequest("POST", "http://provider.test/anthropic/v1/chat", strings.NewReader(`{"max_tokens":10,"container":"c"}`))
	req.Header.Set("anthropic-version", "2023-06-01")
	if got := read(t, req).most(estimatePrice).InputTokens; got != anthropicWindow+in(`{"max_tokens":10,"container":"c"}`) {
		t.Errorf("a request with anthropic-version is held at %d input tokens, want Anthropic's window", got)
	}
	p := estimatePrice
	p.MaxInputTokens = 5000
	req, _ = http.NewRequest("POST", "http://provider.test"+responsesPath, strings.NewReader(`{"previous_response_id":"r"}`))
	if got := read(t, req).most(p).InputTokens; got != 5000+in(`{"previous_response_id":"r"}`) {
		t.Errorf("MaxInputTokens 5000: held at %d input tokens", got)
	}
}

// BenchmarkReadRequest reads an agent's request of some 24 KB: a system
// prompt, 40 turns, tools.
func BenchmarkReadRequest(b *testing.B) {
	var body strings.Builder
	body.WriteString(`{"model":"gpt-x","max_tokens":1024,"tools":[{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"q":{"type":"string"}}}}}],"messages":[{"role":"system","content":"` + strings.Repeat("Be brief. ", 200) + `"}`)
	for i := range 40 {
		body.WriteString(`,{"role":"user","content":"` + strings.Repeat("turn "+strconv.Itoa(i)+" ", 60) + `"}`)
	}
	body.WriteString(`]}`)
	data := []byte(body.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest("POST", "http://provider.test"+chatPath, bytes.NewReader(data))
		if read(b, req).most(estimatePrice).OutputTokens != 1024 {
			b.Fatal("misread")
		}
	}
}

// TestEstimateReadsWhatPythonReads: servers in Python read a body's bytes
// as UTF-8 with or without a byte order mark, or as UTF-16 or UTF-32, and
// take NaN, Infinity and -Infinity for numbers: such a body's counts are
// read, and its caps held at the default, since Go's servers and others
// refuse it.
func TestEstimateReadsWhatPythonReads(t *testing.T) {
	const body = `{"max_tokens":10,"n":4}`
	utf16 := func(s string, bigEndian bool) string {
		var b []byte
		for _, u := range utf16.Encode([]rune(s)) {
			if bigEndian {
				b = append(b, byte(u>>8), byte(u))
			} else {
				b = append(b, byte(u), byte(u>>8))
			}
		}
		return string(b)
	}
	utf32 := func(s string) string {
		var b []byte
		for _, r := range s {
			b = append(b, byte(r), byte(r>>8), byte(r>>16), byte(r>>24))
		}
		return string(b)
	}
	for _, c := range []struct {
		name, body string
		out        int64
	}{
		{"UTF-8 with a byte order mark", "\xef\xbb\xbf" + body, 4000},
		{"UTF-16, big-endian", utf16(body, true), 4000},
		{"UTF-16, little-endian, with a byte order mark", "\xff\xfe" + utf16(body, false), 4000},
		{"UTF-32, little-endian", utf32(body), 4000},
		{"NaN before the count", `{"temperature":NaN,"n":4,"max_tokens":10}`, 4000},
		{"Infinity as the count", `{"n":Infinity,"max_tokens":10}`, 1000 * maxAnswers},
		{"-Infinity as a cap", `{"n":2,"max_tokens":-Infinity}`, 2000},
		{"NaN in a string is text", `{"n":2,"max_tokens":10,"messages":[{"role":"user","content":"NaN \\\" Infinity"}]}`, 20},
	} {
		got := heldAt(t, chatPath, c.body).OutputTokens
		if got != c.out {
			t.Errorf("%s: %q held at %d output tokens, want %d", c.name, c.body, got, c.out)
		}
	}
}

// TestEstimateDeepBodyKeepsTheStack: a body nested deeper than any
// parser takes is read without a call for each level (a few MiB of "["
// would otherwise overflow the goroutine's stack, a crash no recover
// catches), as broken JSON, and what follows the deep value still counts.
func TestEstimateDeepBodyKeepsTheStack(t *testing.T) {
	defer debug.SetMaxStack(debug.SetMaxStack(64 << 20))
	const depth = 1 << 20
	body := `{"messages":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + `,"n":5,"max_tokens":100}`
	got := heldAt(t, chatPath, body)
	if want := (Usage{InputTokens: in(body), OutputTokens: 5 * estimatePrice.MaxOutputTokens}); got != want {
		t.Errorf("a body nested %d deep is held at %+v, want %+v", depth, got, want)
	}
}

// TestEstimateCountsEveryPrompt: a legacy completion's "prompt" may be a
// list of prompts (strings, or lists of token ids), and the server
// answers each of them n times; a list of token ids is one prompt.
func TestEstimateCountsEveryPrompt(t *testing.T) {
	const legacy = "/v1/completions"
	checkEstimates(t, []estimateCase{
		{"one prompt", legacy, `{"max_tokens":10,"n":2,"prompt":"a"}`, 20, 0},
		{"a list of one", legacy, `{"max_tokens":10,"n":2,"prompt":["a"]}`, 20, 0},
		{"a list of three", legacy, `{"max_tokens":10,"n":2,"prompt":["a","b","c"]}`, 60, 0},
		{"token ids are one prompt", legacy, `{"max_tokens":10,"n":2,"prompt":[1,2,3]}`, 20, 0},
		{"lists of token ids", legacy, `{"max_tokens":10,"prompt":[[1,2],[3],[4]]}`, 30, 0},
		{"best_of each", legacy, `{"max_tokens":10,"best_of":3,"n":2,"prompt":["a","b"]}`, 60, 0},
		{"a case variant", legacy, `{"max_tokens":10,"Prompt":["a","b"]}`, 20, 0},
		{"an unknown path", "/v2/generate", `{"max_tokens":10,"prompt":["a","b"]}`, 20, 0},
		{"a chat's messages are one conversation", chatPath, `{"max_tokens":10,"messages":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`, 10, 0},
	})
}

// TestWatchUsageOfEachShape: the usage a response reports is read whole
// from a JSON body, from a stream's events, and from Gemini's stream as
// it comes without alt=sse: a JSON array of chunks, the last one's counts
// the answer's.
func TestWatchUsageOfEachShape(t *testing.T) {
	for _, c := range []struct {
		name, contentType, body string
		want                    Usage
	}{
		{"chat completion", "application/json", `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5}}`, Usage{InputTokens: 12, OutputTokens: 5}},
		{"chat stream", "text/event-stream", "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n", Usage{InputTokens: 7, OutputTokens: 3}},
		{"gemini stream as a JSON array", "application/json", `[{"candidates":[{"content":{"parts":[{"text":"hi"}]}}],"usageMetadata":{"promptTokenCount":8}},
{"candidates":[{"content":{"parts":[{"text":" there"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":3,"totalTokenCount":11}}]`, Usage{InputTokens: 8, OutputTokens: 3}},
	} {
		resp := &http.Response{Header: http.Header{"Content-Type": {c.contentType}}, Body: io.NopCloser(strings.NewReader(c.body))}
		var got Usage
		var final, called bool
		WatchUsage(resp, func(u Usage, f bool) { got, final, called = u, f, true })
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if !called || got != c.want || !final {
			t.Errorf("%s: usage %+v (final %v, told %v); want %+v, final", c.name, got, final, called, c.want)
		}
	}
}
