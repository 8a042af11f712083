package proxy

import (
	"strings"
	"testing"
)

// TestModel: the top-level model is read and renamed, and no other byte
// of the body moves; a nested "model" or a body that is not JSON is left.
func TestModel(t *testing.T) {
	for _, c := range []struct{ path, body, model, renamed string }{
		{"/v1/chat/completions", `{"messages":[{"model":"inner"}], "model" : "gpt-x" ,"n":1}`, "gpt-x", `{"messages":[{"model":"inner"}], "model" : "gpt-y" ,"n":1}`},
		{"/v1/messages", `{"metadata":{"model":"no"}}`, "", `{"metadata":{"model":"no"}}`},
		{"/v1/chat/completions", `{"model": nope`, "", `{"model": nope`},
		{"/v1/chat/completions", `{"model":"a\"b"}`, `a"b`, `{"model":"gpt-y"}`},
		{"/v1beta/models/gemini-x:streamGenerateContent", `{"contents":[]}`, "gemini-x", `{"contents":[]}`},
	} {
		if got, err := modelOf(c.path, []byte(c.body)); got != c.model || err != nil {
			t.Errorf("modelOf(%q) = %q, %v, want %q", c.body, got, err, c.model)
		}
		if got := string(renameModel([]byte(c.body), "gpt-y")); got != c.renamed {
			t.Errorf("renameModel(%q) = %q, want %q", c.body, got, c.renamed)
		}
	}
	for _, body := range []string{`{"model":"a","n":1,"model":"b"}`, `{"model":"a","mod\u0065l":"b"}`, `{"model":"` + strings.Repeat("m", MaxModel+1) + `"}`} {
		if m, err := modelOf("/v1/chat/completions", []byte(body)); err == nil {
			t.Errorf("modelOf(%.40q) = %q, want an error", body, m)
		}
	}
	if got := renamePathModel("/v1beta/models/gemini-x:generateContent", "gemini-y"); got != "/v1beta/models/gemini-y:generateContent" {
		t.Errorf("renamePathModel: %q", got)
	}
}
