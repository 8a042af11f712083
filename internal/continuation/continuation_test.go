package continuation

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestContinue(t *testing.T) {
	type msg struct{ Role, Content string }
	decode := func(t *testing.T, body []byte) (map[string]any, []msg) {
		t.Helper()
		var req map[string]any
		var m struct{ Messages []msg }
		if err := json.Unmarshal(body, &req); err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(body, &m)
		return req, m.Messages
	}

	r, err := Continue(OpenAIChat, []byte(`{"model":"gpt","stream":true,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"response_format":{"type":"text"}}`), "Hello, wor")
	if err != nil || r.Trimmed != "" {
		t.Fatalf("openai: %v %+v", err, r)
	}
	req, m := decode(t, r.Body)
	if req["stream"] != true || req["model"] != "gpt" || len(m) != 4 || m[2] != (msg{"assistant", "Hello, wor"}) || m[3] != (msg{"user", Ask}) {
		t.Errorf("openai continuation: %s", r.Body)
	}

	r, err = Continue(AnthropicMessages, []byte(`{"model":"claude","max_tokens":100,"stream":true,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}`), "Hello, world \n")
	if err != nil || r.Trimmed != " \n" {
		t.Fatalf("anthropic: %v %+v", err, r)
	}
	req, _ = decode(t, r.Body)
	var am struct {
		Messages []json.RawMessage
	}
	json.Unmarshal(r.Body, &am)
	if req["max_tokens"] != float64(100) || len(am.Messages) != 2 || string(am.Messages[1]) != `{"role":"assistant","content":"Hello, world"}` {
		t.Errorf("anthropic continuation: %s", r.Body)
	}

	for _, c := range []struct {
		d    Dialect
		body string
		text string
	}{
		{OpenAIChat, `{"messages":[{"role":"user","content":"hi"}],"n":2}`, "x"},
		{OpenAIChat, `{"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{}}}`, "x"},
		{OpenAIChat, `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"pre"}]}`, "x"},
		{OpenAIChat, `{"messages":[]}`, "x"},
		{OpenAIChat, `not json`, "x"},
		{AnthropicMessages, `{"messages":[{"role":"user","content":"hi"}]}`, "  \n"},
		{Unknown, `{"messages":[{"role":"user","content":"hi"}]}`, "x"},
	} {
		if _, err := Continue(c.d, []byte(c.body), c.text); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Continue(%v, %s, %q): %v, want ErrUnsupported", c.d, c.body, c.text, err)
		}
	}
}

func TestDialectOf(t *testing.T) {
	for path, want := range map[string]Dialect{
		"/v1/chat/completions": OpenAIChat, "/openai/deployments/x/chat/completions": OpenAIChat,
		"/v1/messages": AnthropicMessages, "/v1/responses": Unknown, "/v1beta/models/g:streamGenerateContent": Unknown,
	} {
		if got := DialectOf(path); got != want {
			t.Errorf("DialectOf(%q) = %v, want %v", path, got, want)
		}
	}
}

// TestContinueOffersNoTools checks that a continuation, which is to write
// text, is offered no tool the API lets it go without: OpenAI's tools are
// kept with tool_choice "none" (function_call "none" for the older
// functions); Anthropic's tools, tool_choice and MCP servers are left out,
// unless the conversation holds tool blocks, which the API refuses without
// tools: then they stay, with tool_choice "none".
func TestContinueOffersNoTools(t *testing.T) {
	const tools = `"tools":[{"type":"function","function":{"name":"transfer_funds","parameters":{}}}]`
	const anthTools = `"tools":[{"name":"transfer_funds","input_schema":{"type":"object"}}]`
	const hi = `"messages":[{"role":"user","content":"hi"}]`
	const toolTurns = `"messages":[{"role":"user","content":"pay bob"},` +
		`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"transfer_funds","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"done"}]}]`
	const serverTurns = `"messages":[{"role":"user","content":"news?"},` +
		`{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[]}]},` +
		`{"role":"user","content":"more"}]`
	for _, c := range []struct {
		d          Dialect
		body       string
		want, gone map[string]string // fields and their values; fields left out
	}{
		{OpenAIChat, `{"model":"m",` + hi + `,` + tools + `,"tool_choice":"required","parallel_tool_calls":true}`,
			map[string]string{"tool_choice": `"none"`, "parallel_tool_calls": "true"}, nil},
		{OpenAIChat, `{"model":"m",` + hi + `,` + tools + `,"tool_choice":{"type":"function","function":{"name":"transfer_funds"}}}`,
			map[string]string{"tool_choice": `"none"`}, nil},
		{OpenAIChat, `{"model":"m",` + hi + `,"functions":[{"name":"transfer_funds","parameters":{}}],"function_call":{"name":"transfer_funds"}}`,
			map[string]string{"function_call": `"none"`}, nil},
		{OpenAIChat, `{"model":"m",` + hi + `}`, nil, map[string]string{"tool_choice": "", "function_call": ""}},
		{OpenAIChat, `{"model":"m",` + hi + `,"tools":[]}`, nil, map[string]string{"tool_choice": ""}},
		{AnthropicMessages, `{"model":"m","max_tokens":9,` + hi + `,` + anthTools + `,"tool_choice":{"type":"any"},"mcp_servers":[{"type":"url","url":"https://mcp.test","name":"x"}]}`,
			nil, map[string]string{"tools": "", "tool_choice": "", "mcp_servers": ""}},
		{AnthropicMessages, `{"model":"m","max_tokens":9,` + toolTurns + `,` + anthTools + `,"tool_choice":{"type":"auto"}}`,
			map[string]string{"tool_choice": `{"type":"none"}`}, nil},
		{AnthropicMessages, `{"model":"m","max_tokens":9,` + serverTurns + `,"tools":[{"type":"web_search_20250305","name":"web_search"}]}`,
			map[string]string{"tool_choice": `{"type":"none"}`}, nil},
	} {
		r, err := Continue(c.d, []byte(c.body), "Hello")
		if err != nil {
			t.Fatalf("%v %s: %v", c.d, c.body, err)
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		for k, v := range c.want {
			if string(got[k]) != v {
				t.Errorf("%v %s:\n%s is %s, want %s", c.d, c.body, k, got[k], v)
			}
		}
		for k := range c.gone {
			if _, ok := got[k]; ok {
				t.Errorf("%v %s:\n%s is %s, want it left out", c.d, c.body, k, got[k])
			}
		}
		if _, kept := got["tools"]; c.d == AnthropicMessages && kept != (c.want != nil) {
			t.Errorf("%v %s: tools kept %v", c.d, c.body, kept)
		}
	}
}

// Structured output is never continued, even when its schema names a
// property "text".
func TestContinuationRefusesStructuredOutput(t *testing.T) {
	for _, body := range []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"reply","schema":{"type":"object","properties":{"text":{"type":"string"}}}}}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_schema","json_schema":{"name":"text","schema":{}}}}`,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object","description":"give \"text\""}}`,
	} {
		_, err := Continue(OpenAIChat, []byte(body), `{"text":"hal`)
		if err == nil {
			t.Errorf("structured output request continued: %s", body)
		}
	}
}
