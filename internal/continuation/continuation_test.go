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
