// Package continuation asks a model to go on with an answer whose stream
// was cut: it builds, from the request that was cut and the text that
// reached the caller, the request that continues it, in the dialect of the
// request's API.
//
// Anthropic's Messages API continues a prefill: the text delivered becomes
// the last, assistant, message, and the model writes what follows it. The
// API refuses a prefill that ends in whitespace, so that whitespace is cut
// off and given back as Request.Trimmed: the model writes it again, and the
// caller, which has it already, must not get it twice.
//
// OpenAI's Chat Completions API, and the servers that speak it, have no
// prefill: the text delivered becomes an assistant message, followed by a
// user message asking the model to continue exactly where it stopped.
//
// Only text is continued: a request that asks for structured output, for
// several choices, or whose last message is already the assistant's is
// refused with ErrUnsupported, as are the other APIs. A continuation is
// offered no tool the API lets it go without: OpenAI's keep their tools
// (the conversation may refer to them) under tool_choice "none"
// (function_call "none" for the older functions); Anthropic's lose their
// tools, tool_choice and MCP servers, unless the conversation holds a tool
// block (tool_use, tool_result, a server tool's), which the API refuses
// without the tools: then they stay, under tool_choice {"type":"none"}.
// What a continuation answers is still to be checked: a server may ignore
// tool_choice.
package continuation

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"unicode"
)

// ErrUnsupported is the error of a request that cannot be continued.
var ErrUnsupported = errors.New("continuation: the request cannot be continued")

// Ask is the user message that asks an OpenAI-style model to go on.
const Ask = "Continue exactly where your previous message stopped, without repeating any of it."

// Dialect is the API a request is written for.
type Dialect uint8

// Dialects that can be continued.
const (
	Unknown Dialect = iota
	OpenAIChat
	AnthropicMessages
)

// DialectOf returns the dialect of a request by its URL path.
func DialectOf(path string) Dialect {
	switch {
	case strings.HasSuffix(path, "/chat/completions"):
		return OpenAIChat
	case strings.HasSuffix(path, "/messages"):
		return AnthropicMessages
	}
	return Unknown
}

// Request is a continuation request.
type Request struct {
	// Body is the body to send, in place of the cut request's.
	Body []byte
	// Trimmed is the whitespace cut from the end of the delivered text
	// (Anthropic refuses a prefill that ends in it): the continuation's
	// text begins with it again, and it is to be dropped from there.
	Trimmed string
}

// Continue returns the request that continues the answer to body, a
// request of dialect d, after delivered, the text that reached the caller.
func Continue(d Dialect, body []byte, delivered string) (Request, error) {
	var req map[string]json.RawMessage
	if err := json.Unmarshal(body, &req); err != nil || req == nil {
		return Request{}, ErrUnsupported
	}
	var messages []json.RawMessage
	if err := json.Unmarshal(req["messages"], &messages); err != nil || len(messages) == 0 {
		return Request{}, ErrUnsupported
	}
	var last struct {
		Role string `json:"role"`
	}
	if json.Unmarshal(messages[len(messages)-1], &last) != nil || last.Role == "assistant" {
		return Request{}, ErrUnsupported
	}
	var out Request
	switch d {
	case OpenAIChat:
		if n := bytes.TrimSpace(req["n"]); len(n) > 0 && string(n) != "1" && string(n) != "null" {
			return Request{}, ErrUnsupported
		}
		if rf := bytes.TrimSpace(req["response_format"]); len(rf) > 0 && string(rf) != "null" {
			var format struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(rf, &format) != nil || format.Type != "text" {
				return Request{}, ErrUnsupported
			}
		}
		messages = append(messages, message("assistant", delivered), message("user", Ask))
		if offered(req["tools"]) {
			req["tool_choice"] = json.RawMessage(`"none"`)
		}
		if offered(req["functions"]) {
			req["function_call"] = json.RawMessage(`"none"`)
		}
	case AnthropicMessages:
		prefill := strings.TrimRightFunc(delivered, unicode.IsSpace)
		if prefill == "" {
			return Request{}, ErrUnsupported
		}
		out.Trimmed = delivered[len(prefill):]
		if holdsToolBlocks(messages) {
			if offered(req["tools"]) {
				req["tool_choice"] = json.RawMessage(`{"type":"none"}`)
			}
		} else {
			delete(req, "tools")
			delete(req, "tool_choice")
			delete(req, "mcp_servers")
		}
		messages = append(messages, message("assistant", prefill))
	default:
		return Request{}, ErrUnsupported
	}
	raw, err := json.Marshal(messages)
	if err != nil {
		return Request{}, ErrUnsupported
	}
	req["messages"] = raw
	if out.Body, err = json.Marshal(req); err != nil {
		return Request{}, ErrUnsupported
	}
	return out, nil
}

// offered reports whether raw, a request's tools (or functions), offers
// any.
func offered(raw json.RawMessage) bool {
	var list []json.RawMessage
	return json.Unmarshal(raw, &list) == nil && len(list) > 0
}

// holdsToolBlocks reports whether an Anthropic conversation holds a tool
// block: a tool_use or tool_result, or a server tool's (server_tool_use,
// web_search_tool_result, mcp_tool_use...). The API refuses such a
// conversation without the tools. A message it cannot read counts as one.
func holdsToolBlocks(messages []json.RawMessage) bool {
	for _, m := range messages {
		var msg struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m, &msg) != nil {
			return true
		}
		var text string
		if json.Unmarshal(msg.Content, &text) == nil {
			continue
		}
		var blocks []struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(msg.Content, &blocks) != nil {
			return true
		}
		for _, b := range blocks {
			if strings.HasSuffix(b.Type, "tool_use") || strings.HasSuffix(b.Type, "tool_result") {
				return true
			}
		}
	}
	return false
}

func message(role, text string) json.RawMessage {
	m, _ := json.Marshal(struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}{role, text})
	return m
}
