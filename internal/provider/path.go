package provider

import "strings"

// geminiModelAt is what Gemini's paths put before a model's name.
const geminiModelAt = "/models/"

// geminiTunedModelAt is what they put before a tuned model's name.
const geminiTunedModelAt = "/tunedModels/"

// geminiPath reads a Gemini path (".../models/NAME:method"): where its
// model's name begins (-1 if it names none), the name, and the method it
// calls, if it calls one (called).
func geminiPath(path string) (at int, name, method string, called bool) {
	i := strings.Index(path, geminiModelAt)
	if i < 0 {
		return -1, "", "", false
	}
	at = i + len(geminiModelAt)
	name, method, called = strings.Cut(path[at:], ":")
	return at, name, method, called
}

// PathModel returns the model a request's path names, whatever the
// provider's dialect: Gemini's and Vertex AI's ".../models/NAME:verb"
// and ".../tunedModels/NAME:verb", Azure OpenAI's ".../deployments/NAME/...",
// Bedrock's "/model/NAME/converse" (and invoke, and their streams; NAME
// may hold slashes, an ARN's); "" if it names none. Where a path names a
// model, the provider serves that one, whatever the body says.
func PathModel(path string) string {
	if name := GeminiModel(path); name != "" {
		return name
	}
	if rest, ok := strings.CutPrefix(path, "/model/"); ok {
		if i := strings.LastIndexByte(rest, '/'); i > 0 {
			switch rest[i+1:] {
			case "converse", "converse-stream", "invoke", "invoke-with-response-stream":
				return rest[:i]
			}
		}
	}
	if i := strings.Index(path, geminiTunedModelAt); i >= 0 {
		name, _, _ := strings.Cut(path[i+len(geminiTunedModelAt):], ":")
		return name
	}
	if _, rest, ok := strings.Cut(path, "/deployments/"); ok {
		name, _, _ := strings.Cut(rest, "/")
		return name
	}
	return ""
}

// RunsNoModel reports whether a POST to path is one the providers'
// APIs answer without running a model: uploading a file, making a
// conversation, thread or store to hold input, cancelling. Any other POST
// may run one, named in its path or body or not (a batch over an
// uploaded file, a stored prompt).
func RunsNoModel(path string) bool {
	path = strings.TrimSuffix(path, "/")
	parent, last := "", path[strings.LastIndexByte(path, '/')+1:]
	if up := strings.TrimSuffix(path, "/"+last); strings.Contains(up, "/") {
		parent = up[:strings.LastIndexByte(up, '/')]
		parent = parent[strings.LastIndexByte(parent, '/')+1:] // the collection above the item named last's parent
	}
	switch {
	case last == "files", last == "uploads", last == "cancel", last == "threads", last == "conversations",
		last == "vector_stores", strings.Contains(path, "/vector_stores/"):
		return true
	case last == "parts" || last == "complete":
		return parent == "uploads" // ".../uploads/ID/parts"; Anthropic's "/v1/complete" runs a model
	case last == "messages":
		return parent == "threads" // an Assistants thread's, not Anthropic's Messages
	case last == "items":
		return parent == "conversations"
	}
	return false
}

// GeminiModel returns the model a Gemini path names
// (".../models/NAME:generateContent"), or "": Gemini's requests carry
// their model in the path, not the body.
func GeminiModel(path string) string {
	_, name, _, _ := geminiPath(path)
	return name
}

// GeminiMethod returns the method of a model a Gemini path calls
// ("generateContent", "streamGenerateContent"); ok is false for a path
// that calls none.
func GeminiMethod(path string) (method string, ok bool) {
	_, _, method, ok = geminiPath(path)
	return method, ok
}

// RenameGeminiModel returns path asking for model instead, if it names
// one; else path.
func RenameGeminiModel(path, model string) string {
	at, name, _, _ := geminiPath(path)
	if name == "" {
		return path
	}
	return path[:at] + model + path[at+len(name):]
}
