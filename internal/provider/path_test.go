package provider

import "testing"

// TestGeminiPath: a Gemini path's model, the method it calls, and the path
// renamed to another model, read by one reader.
func TestGeminiPath(t *testing.T) {
	for _, c := range []struct {
		path, model, method string
		called              bool
		renamed             string
	}{
		{"/v1beta/models/gemini-2.0-flash:generateContent", "gemini-2.0-flash", "generateContent", true, "/v1beta/models/other:generateContent"},
		{"/v1beta/models/g:streamGenerateContent", "g", "streamGenerateContent", true, "/v1beta/models/other:streamGenerateContent"},
		{"/v1/projects/p/locations/l/publishers/google/models/g:countTokens", "g", "countTokens", true, "/v1/projects/p/locations/l/publishers/google/models/other:countTokens"},
		{"/v1beta/models/g", "g", "", false, "/v1beta/models/other"},
		{"/v1beta/models/g:", "g", "", true, "/v1beta/models/other:"},
		{"/v1/chat/completions", "", "", false, "/v1/chat/completions"},
		{"/v1beta/models/", "", "", false, "/v1beta/models/"},
	} {
		method, called := GeminiMethod(c.path)
		if m := GeminiModel(c.path); m != c.model || method != c.method || called != c.called {
			t.Errorf("%s: model %q, method %q %v; want %q, %q %v", c.path, m, method, called, c.model, c.method, c.called)
		}
		if got := RenameGeminiModel(c.path, "other"); got != c.renamed {
			t.Errorf("%s renamed: %q, want %q", c.path, got, c.renamed)
		}
	}
}
