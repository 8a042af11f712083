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

// TestPathModel: the model a path names, in each dialect that names one
// there.
func TestPathModel(t *testing.T) {
	for path, want := range map[string]string{
		"/v1beta/models/gemini-x:generateContent":                       "gemini-x",
		"/v1beta/tunedModels/big-tuned:generateContent":                 "big-tuned",
		"/v1/projects/p/locations/l/publishers/google/models/g:predict": "g",
		"/openai/deployments/big/chat/completions":                      "big",
		"/openai/deployments/big":                                       "big",
		"/v1/chat/completions":                                          "",
		"/v1/messages/batches":                                          "",
	} {
		if got := PathModel(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}

// TestRunsNoModel: the POSTs known to run no model, and those that may.
func TestRunsNoModel(t *testing.T) {
	for path, want := range map[string]bool{
		"/v1/files":                         true,
		"/upload/v1beta/files":              true,
		"/v1/uploads":                       true,
		"/v1/uploads/up_1/parts":            true,
		"/v1/uploads/up_1/complete":         true,
		"/v1/batches/b_1/cancel":            true,
		"/v1/messages/batches/m_1/cancel":   true,
		"/v1/threads":                       true,
		"/v1/threads/t_1/messages":          true,
		"/v1/vector_stores":                 true,
		"/v1/vector_stores/vs_1/files":      true,
		"/v1/conversations":                 true,
		"/v1/conversations/c_1/items":       true,
		"/v1/chat/completions":              false,
		"/v1/messages":                      false,
		"/v1/complete":                      false,
		"/v1/messages/batches":              false,
		"/v1/batches":                       false,
		"/v1/responses":                     false,
		"/v1/threads/runs":                  false,
		"/v1/threads/t_1/runs":              false,
		"/v1beta/models/g:generateContent":  false,
		"/v1/some/endpoint/rebound/ignores": false,
	} {
		if got := RunsNoModel(path); got != want {
			t.Errorf("%s: %v, want %v", path, got, want)
		}
	}
}
