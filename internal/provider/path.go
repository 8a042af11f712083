package provider

import "strings"

// geminiModelAt is what Gemini's paths put before a model's name.
const geminiModelAt = "/models/"

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
