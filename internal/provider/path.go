package provider

import "strings"

// GeminiModel returns the model a Gemini path names
// (".../models/NAME:generateContent"), or "": Gemini's requests carry
// their model in the path, not the body.
func GeminiModel(path string) string {
	_, rest, ok := strings.Cut(path, "/models/")
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, ":")
	return name
}
