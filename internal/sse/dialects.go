package sse

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Dialect is the provider's stream format, as a Tracker recognised it.
type Dialect uint8

const (
	Unknown   Dialect = iota // not recognised (yet): the stream is never judged
	Chat                     // OpenAI Chat Completions chunks
	Responses                // OpenAI Responses API events
	Anthropic                // Anthropic Messages events
	Gemini                   // Gemini streamGenerateContent chunks
	Plain                    // data: {"delta": …} events ending in [DONE]
)

var dialectNames = [...]string{"unknown", "openai-chat", "openai-responses", "anthropic", "gemini", "plain"}

func (d Dialect) String() string { return dialectNames[d] }

// chunk is the union of the providers' stream chunks, as far as tracking
// needs.
type chunk struct {
	Type         string          `json:"type"`
	Error        json.RawMessage `json:"error"`
	Delta        json.RawMessage `json:"delta"`
	ID           string          `json:"id"`
	Created      json.RawMessage `json:"created"`
	Usage        json.RawMessage `json:"usage"`
	Index        int             `json:"index"`
	ContentBlock struct {
		Type string `json:"type"`
	} `json:"content_block"`
	Item struct {
		Type string `json:"type"`
	} `json:"item"`
	Choices *[]struct {
		Index int `json:"index"`
		Delta struct {
			Content      string          `json:"content"`
			ToolCalls    json.RawMessage `json:"tool_calls"`
			Refusal      string          `json:"refusal"`
			FunctionCall json.RawMessage `json:"function_call"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Candidates *[]struct {
		Content struct {
			Parts []struct {
				Text         string          `json:"text"`
				FunctionCall json.RawMessage `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
		FinishReason string `json:"finishReason"`
	} `json:"candidates"`
}

// anthropicDelta is the delta of a content_block_delta or message_delta.
type anthropicDelta struct {
	Type       string `json:"type"`
	Text       string `json:"text"`
	StopReason string `json:"stop_reason"`
}

// kind says what one complete event was, and takes in what it delivered.
func (t *Tracker) kind(name string, trimmed []byte) Kind {
	if string(trimmed) == "[DONE]" {
		if t.dialect == Unknown {
			return End // the end of a stream never recognised
		}
		t.ended = true
		return End
	}
	var c chunk
	if name == "error" {
		return Error
	}
	if err := json.Unmarshal(trimmed, &c); err != nil {
		// A field of the wrong type is skipped, the rest read: a tool
		// call is one, whatever else is off in it.
		if _, wrongType := err.(*json.UnmarshalTypeError); !wrongType {
			return Preamble // not JSON: nothing a tracked dialect sends
		}
	}
	if nonEmpty(c.Error) || c.Type == "error" {
		return Error
	}
	switch {
	case c.Choices != nil:
		return t.chat(&c)
	case c.Candidates != nil:
		return t.gemini(&c)
	case strings.HasPrefix(c.Type, "response."):
		return t.responses(&c)
	case c.Type != "":
		return t.anthropic(&c)
	case nonEmpty(c.Delta):
		t.recognise(Plain)
		var s string
		if json.Unmarshal(c.Delta, &s) == nil {
			t.addText(s)
		} else {
			t.notText = true
		}
		t.events++
		return Content
	}
	return Preamble
}

func (t *Tracker) recognise(d Dialect) {
	if t.dialect == Unknown {
		t.dialect = d
	}
}

func (t *Tracker) chat(c *chunk) Kind {
	t.recognise(Chat)
	if t.chatID == "" && c.ID != "" {
		t.chatID, t.chatCreated = c.ID, bytes.Clone(c.Created)
	}
	if t.choices == nil {
		t.choices = map[int]bool{}
	}
	k := Preamble
	if nonEmpty(c.Usage) {
		k = Finish
	}
	for _, ch := range *c.Choices {
		d := ch.Delta
		content := false
		if d.Content != "" {
			t.addText(d.Content)
			content = true
		}
		if d.Refusal != "" || nonEmpty(d.ToolCalls) || nonEmpty(d.FunctionCall) {
			t.notText = true
			content = true
		}
		finish := ""
		if ch.FinishReason != nil {
			finish = *ch.FinishReason
		}
		switch {
		case content:
			k = Content
		case finish != "":
			k = Finish
		}
		if finish == "tool_calls" || finish == "function_call" {
			t.notText = true
		}
		// A choice is finished by its finish_reason, and open again if
		// content follows it.
		t.choices[ch.Index] = finish != "" || t.choices[ch.Index] && !content
	}
	t.finished = len(t.choices) > 0
	for _, done := range t.choices {
		t.finished = t.finished && done
	}
	if k == Content {
		t.events++
	}
	return k
}

// ChatID returns the id and created time of an OpenAI chat stream's first
// chunk: a continuation's chunks are given them, since an SDK accumulates
// only the chunks of one completion.
func (t *Tracker) ChatID() (id string, created json.RawMessage) { return t.chatID, t.chatCreated }

func (t *Tracker) gemini(c *chunk) Kind {
	t.recognise(Gemini)
	k := Preamble
	for _, cand := range *c.Candidates {
		for _, p := range cand.Content.Parts {
			if p.Text != "" {
				t.addText(p.Text)
				k = Content
			}
			if nonEmpty(p.FunctionCall) {
				t.notText = true
				k = Content
			}
		}
		if cand.FinishReason != "" {
			t.ended = true
			if k != Content {
				k = End
			}
		}
	}
	if k == Content {
		t.events++
	}
	return k
}

func (t *Tracker) responses(c *chunk) Kind {
	t.recognise(Responses)
	switch c.Type {
	case "response.completed":
		t.ended = true
		return End
	case "response.failed", "response.incomplete":
		t.ended = true
		return Error
	}
	if c.Type == "response.output_item.added" && c.Item.Type != "message" && c.Item.Type != "reasoning" {
		t.notText = true // a function call, a hosted tool's call
	}
	if !strings.HasSuffix(c.Type, ".delta") || !nonEmpty(c.Delta) {
		return Preamble
	}
	switch c.Type {
	case "response.output_text.delta":
		var s string
		json.Unmarshal(c.Delta, &s)
		t.addText(s)
	case "response.reasoning_text.delta", "response.reasoning_summary_text.delta":
		// thinking: content, though not the answer's text
	default: // function call arguments, refusals, tool input
		t.notText = true
	}
	t.events++
	return Content
}

func (t *Tracker) anthropic(c *chunk) Kind {
	switch c.Type {
	case "content_block_start":
		t.recognise(Anthropic)
		if b := c.ContentBlock.Type; b != "" && b != "text" {
			t.notText = true // a tool_use, a thinking block: not text to continue
		}
		t.block(c.Index)
		return Preamble
	case "content_block_stop":
		t.recognise(Anthropic)
		if c.Index == t.blocks-1 {
			t.blockOpen = false
		}
		return Finish
	case "message_delta":
		t.recognise(Anthropic)
		var d anthropicDelta
		json.Unmarshal(c.Delta, &d)
		if d.StopReason == "tool_use" || d.StopReason == "pause_turn" {
			t.notText = true // the turn is a tool's: pause_turn, a server tool's
		}
		t.finished = d.StopReason != ""
		return Finish
	case "message_start", "ping":
		t.recognise(Anthropic)
		return Preamble
	case "message_stop":
		t.recognise(Anthropic)
		t.ended = true
		return End
	case "content_block_delta":
		t.recognise(Anthropic)
		t.block(c.Index)
		var d anthropicDelta
		json.Unmarshal(c.Delta, &d)
		if d.Type == "text_delta" {
			t.addText(d.Text)
		} else {
			t.notText = true // tool input, thinking, citations
		}
		t.finished = false // content after the stop reason: the answer goes on
		t.events++
		return Content
	}
	return Preamble
}

// block notes that an Anthropic stream's block i has started, or been
// written to. A block that comes back after its stop, or out of turn, is
// not opened again: a well-formed stream has neither.
func (t *Tracker) block(i int) {
	if i >= t.blocks {
		t.blocks, t.blockOpen = i+1, true
	}
}
