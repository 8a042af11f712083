package proxy

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestConversationIsNamedByTheClientElseByTheStartOfItsPrompt(t *testing.T) {
	const (
		sys   = `{"role":"system","content":"You are a careful agent."}`
		user1 = `{"role":"user","content":"Fix the bug in main.go"}`
		asst1 = `{"role":"assistant","content":"Reading main.go"}`
		user2 = `{"role":"user","content":"Go on"}`
		tools = `[{"type":"function","function":{"name":"read","parameters":{"type":"object"}}}]`
	)
	// Each pair names one conversation, or two.
	for _, c := range []struct {
		what string
		a, b string
		same bool
	}{
		{"turns of one chat", `{"model":"m","messages":[` + sys + `,` + user1 + `],"tools":` + tools + `}`,
			`{"model":"m","messages":[` + sys + `,` + user1 + `,` + asst1 + `,` + user2 + `],"tools":` + tools + `}`, true},
		{"another first message", `{"messages":[` + sys + `,` + user1 + `]}`, `{"messages":[` + sys + `,` + user2 + `]}`, false},
		{"another system prompt", `{"messages":[` + sys + `,` + user1 + `]}`, `{"messages":[{"role":"developer","content":"Be brief."},` + user1 + `]}`, false},
		{"other tools", `{"messages":[` + user1 + `],"tools":` + tools + `}`, `{"messages":[` + user1 + `],"tools":[]}`, false},
		{"white space and key order", `{"tools":` + tools + `,"messages":[` + sys + `,` + user1 + `]}`,
			"{\n  \"messages\": [ " + strings.ReplaceAll(sys, ",", ", ") + ",\n " + user1 + " ],\n  \"tools\": " + tools + "\n}", true},
		{"the client's key over the prompt", `{"prompt_cache_key":"task-7","messages":[` + user1 + `]}`, `{"prompt_cache_key":"task-7","messages":[` + user2 + `]}`, true},
		{"the client's key over the user", `{"prompt_cache_key":"task-7","user":"ann","messages":[` + user1 + `]}`, `{"prompt_cache_key":"task-7","user":"bob","messages":[` + user1 + `]}`, true},
		{"two keys", `{"prompt_cache_key":"task-7","messages":[` + user1 + `]}`, `{"prompt_cache_key":"task-8","messages":[` + user1 + `]}`, false},
		{"the user", `{"user":"ann","messages":[` + user1 + `]}`, `{"user":"ann","messages":[` + user2 + `]}`, true},
		{"the safety identifier", `{"safety_identifier":"h-1","input":"a"}`, `{"safety_identifier":"h-1","input":"b"}`, true},
		{"an escaped name", `{"user":"ann","messages":[]}`, `{"user":"\u0061nn","messages":[]}`, true},
		{"a key left empty", `{"prompt_cache_key":"","messages":[` + user1 + `]}`, `{"prompt_cache_key":null,"messages":[` + user1 + `,` + asst1 + `]}`, true},
		{"Anthropic's user", `{"metadata":{"user_id":"u-1"},"messages":[` + user1 + `]}`, `{"metadata":{"user_id":"u-1"},"messages":[` + user2 + `]}`, true},
		{"Anthropic's system, its cache breakpoint moving on",
			`{"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]}]}`,
			`{"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]},{"role":"assistant","content":"hello"},{"role":"user","content":[{"type":"text","text":"more","cache_control":{"type":"ephemeral"}}]}]}`, true},
		{"Anthropic's system", `{"system":"You are terse.","messages":[` + user1 + `]}`, `{"system":"You are verbose.","messages":[` + user1 + `]}`, false},
		{"Responses' instructions", `{"instructions":"Be brief.","input":"hi"}`, `{"instructions":"Be brief.","input":[{"role":"user","content":"hi"},{"type":"function_call_output","call_id":"c","output":"x"}]}`, false},
		{"Responses' turns", `{"instructions":"Be brief.","input":[{"role":"user","content":"hi"}]}`, `{"instructions":"Be brief.","input":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"more"}]}`, true},
		{"Gemini's turns", `{"systemInstruction":{"parts":[{"text":"Be brief."}]},"contents":[{"parts":[{"text":"hi"}]}]}`,
			`{"systemInstruction":{"parts":[{"text":"Be brief."}]},"contents":[{"parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"hello"}]},{"role":"user","parts":[{"text":"more"}]}]}`, true},
		{"Gemini's first message", `{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`, `{"contents":[{"role":"user","parts":[{"text":"ho"}]}]}`, false},
	} {
		a, b := conversationOf([]byte(c.a)), conversationOf([]byte(c.b))
		if a == "" || b == "" {
			t.Errorf("%s: %q and %q, want both named", c.what, a, b)
			continue
		}
		if (a == b) != c.same {
			t.Errorf("%s: %q and %q, want the same: %v", c.what, a, b, c.same)
		}
	}
}

func TestConversationOfABodyThatDoesNotSayClearlyIsNone(t *testing.T) {
	const user1 = `{"role":"user","content":"hi"}`
	for _, body := range []string{
		`{"model":"m"}`,               // no prompt, no name
		`{"model":"m","messages":[]}`, // nothing to name it by
		`{"tools":[{"type":"function"}]}`,
		`{"messages":[{"role":"assistant","content":"hi"}]}`,
		`{"prompt_cache_key":"a","prompt_cache_key":"b","messages":[` + user1 + `]}`, // given twice
		`{"Prompt_Cache_Key":"a","messages":[` + user1 + `]}`,                        // spelled another way
		`{"prompt_cache_k\u0065y":"a","prompt_cache_key":"b","messages":[` + user1 + `]}`,
		`{"prompt_cache_key":7,"messages":[` + user1 + `]}`, // not a string
		`{"user":["ann"],"messages":[` + user1 + `]}`,
		`{"metadata":{"user_id":"a","user_id":"b"},"messages":[` + user1 + `]}`,
		`{"metadata":{"User_Id":"a"},"messages":[` + user1 + `]}`,
		`{"messages":[{"role":"user","role":"system","content":"hi"}]}`, // which role?
		`{"messages":[{"Role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"User","content":"hi"}]}`,
		`{"messages":[` + user1 + `],"input":"hi"}`,                        // two prompts
		`{"system":"a","instructions":"b","messages":[` + user1 + `]}`,     // two system prompts
		`{"systemInstruction":{},"system_instruction":{},"contents":[{}]}`, // one, spelled two ways
		`{"messages":[{"role":"user","content":[{"type":"text","text":"hi","cache_control":{},"cache_control":{}}]}]}`,
		`{"messages":[` + user1 + `],"tools":[],"tools":[]}`,
		`{"input":7}`,
		`[{"role":"user","content":"hi"}]`,
		`{"messages":[` + user1 + `]`, // cut short
		`not json`,
		``,
	} {
		if got := conversationOf([]byte(body)); got != "" {
			t.Errorf("%s: conversation %q, want none", body, got)
		}
	}
}

// BenchmarkConversationOf: naming the conversation of a turn of an agent's
// chat (as BenchmarkProxyKeyPool's), from the start of its prompt.
func BenchmarkConversationOf(b *testing.B) {
	system := strings.Repeat("You are a careful coding agent. ", 128)
	tool := `{"type":"function","function":{"name":"read_file","description":"` + strings.Repeat("Reads a file. ", 12) + `","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}`
	body := []byte(`{"model":"gpt-x","tools":[` + strings.Repeat(tool+",", 7) + tool + `],"messages":[{"role":"system","content":"` + system + `"},` +
		`{"role":"user","content":"Fix the failing test in main_test.go"},{"role":"assistant","content":"Reading it."},` +
		`{"role":"user","content":"Go on"},{"role":"assistant","content":"Done."},{"role":"user","content":"Now run it"}]}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if conversationOf(body) == "" {
			b.Fatal("no conversation")
		}
	}
}

// FuzzConversationOf: any body is read without a panic, and white space
// between tokens never changes the conversation a body names (down to
// canonDepth, past which values are hashed as written).
func FuzzConversationOf(f *testing.F) {
	for _, seed := range []string{
		`{"prompt_cache_key":"a","messages":[{"role":"user","content":"hi"}]}`,
		`{"system":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"tools":[{"name":"t"}]}`,
		`{"messages":[{"role":"system","content":"s"},{"role":"developer","content":"d"},{"role":"user","content":"u"}]}`,
		`{"instructions":"i","input":"hello"}`,
		`{"systemInstruction":{"parts":[{"text":"s"}]},"contents":[{"parts":[{"text":"hi"}]}]}`,
		`{"metadata":{"user_id":"u\u00e9"},"messages":[]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		name := conversationOf(body)
		if bytes.Count(body, []byte("{"))+bytes.Count(body, []byte("[")) > canonDepth || !json.Valid(body) {
			return
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, body); err != nil {
			return
		}
		if again := conversationOf(compact.Bytes()); again != name {
			t.Errorf("%q names %q, compacted %q", body, name, again)
		}
	})
}
