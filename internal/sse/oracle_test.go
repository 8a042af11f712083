package sse

// The tracker as it was when it decoded every event with encoding/json:
// the oracle the differential test holds the scanner's tracker equal to.
// Only its names differ from the code it was, and it reads as not JSON an
// event that gives a field it reads twice or spells one another way
// (jsonscantest.KeyFault), which the scanner refuses.

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/rebound-go/rebound/internal/jsonscan/jsonscantest"
)

// oracle follows an event stream as it is read, fed the bytes in any
// split, and tells where its last complete event ends, so that whoever
// hands the stream on can hand over whole events only. It recognises the
// dialect from the events themselves and counts what was delivered.
//
// A oracle is not safe for concurrent use.
type oracle struct {
	// Each, if set, is called at the end of every complete event with
	// the offset just past it (counted from the first byte fed) and its
	// kind: enough to cut a stream into events and drop its preamble.
	Each func(end int64, k Kind)

	dialect     Dialect
	ended       bool // the end marker was seen
	errored     bool // an error event, or an end that says the answer is not whole
	finished    bool // a oracleChunk said why the answer finished (finish_reason)
	events      int  // content events
	textN       int
	text        []byte
	cut         bool         // text passed MaxText and is no longer kept
	notText     bool         // some content was not text, or an end named a tool call
	blocks      int          // an Anthropic stream's content blocks: one past the highest index
	blockOpen   bool         // and whether the last of them is open
	choices     map[int]bool // a chat stream's choices by index: finished or not
	chatID      string
	chatCreated json.RawMessage
	errName     string
	errData     []byte // the first error event's, while errored

	fed, complete int64
	line          []byte
	name          string
	data          []byte
	hasData       bool
	afterCR       bool // the last byte fed was a CR: an LF next belongs to it
	blankCR       bool // that CR ended a blank line, and an event: its LF, if it comes, goes with it
}

// Write feeds the tracker the next bytes of the stream. It never fails.
func (t *oracle) Write(p []byte) (int, error) {
	for i := 0; i < len(p); {
		if t.afterCR {
			t.afterCR = false
			if p[i] == '\n' { // the LF of a CRLF
				i++
				t.fed++
				if t.blankCR { // the event ended at the CR: it takes its LF along
					t.complete = t.fed
				}
				t.blankCR = false
				continue
			}
			t.blankCR = false
		}
		j := bytes.IndexAny(p[i:], "\r\n")
		if j < 0 {
			t.line = append(t.line, p[i:]...)
			t.fed += int64(len(p) - i)
			break
		}
		t.line = append(t.line, p[i:i+j]...)
		t.afterCR = p[i+j] == '\r'
		i += j + 1
		t.fed += int64(j + 1)
		if len(t.line) > 0 {
			t.takeLine()
			continue
		}
		t.blankCR = t.afterCR
		t.dispatch()
	}
	return len(p), nil
}

// takeLine takes in the line just read, without its end.
func (t *oracle) takeLine() {
	line := t.line
	t.line = t.line[:0]
	switch {
	case bytes.HasPrefix(line, []byte("event:")):
		t.name = string(bytes.TrimSpace(line[len("event:"):]))
	case bytes.HasPrefix(line, []byte("data:")):
		if t.hasData {
			t.data = append(t.data, '\n')
		}
		t.data = append(t.data, bytes.TrimPrefix(line[len("data:"):], []byte(" "))...)
		t.hasData = true
	}
}

// dispatch ends the event read so far: the bytes fed are complete up to
// here.
func (t *oracle) dispatch() {
	t.complete = t.fed
	if !t.hasData && t.name == "" {
		return // a comment or a stray blank line
	}
	k := t.observe(t.name, t.data)
	t.name, t.data, t.hasData = "", t.data[:0], false
	if t.Each != nil {
		t.Each(t.complete, k)
	}
}

// errorEvent notes an in-band error event, the first one's name and data
// kept.
func (t *oracle) errorEvent(name string, data []byte) {
	if !t.errored {
		t.errName, t.errData = name, bytes.Clone(data[:min(len(data), maxErrorData)])
	}
	t.errored = true
}

// ErrorEvent returns the name and data (at most 64 KiB) of the first
// in-band error event, if one came.
func (t *oracle) ErrorEvent() (name string, data []byte, ok bool) {
	return t.errName, t.errData, t.errored && t.errData != nil
}

// Rewind forgets what was fed past offset to, the end of a complete
// event: the stream is to go on from there with another stream's events.
// The end, error or finish seen past it are forgotten with it; what it
// delivered before is kept.
func (t *oracle) Rewind(to int64) {
	t.fed, t.complete = to, to
	t.line, t.name, t.data = t.line[:0], "", t.data[:0]
	t.hasData, t.afterCR, t.blankCR = false, false, false
	t.ended, t.errored, t.finished = false, false, false
	t.errName, t.errData = "", nil
}

// Complete is the offset just past the last complete event fed: what may
// be handed on without giving half an event.
func (t *oracle) Complete() int64 { return t.complete }

// Dialect is the stream's dialect, once recognised.
func (t *oracle) Dialect() Dialect { return t.dialect }

// Ended reports whether the stream's end marker was seen ([DONE],
// response.completed, message_stop, a Gemini candidate's finishReason),
// and no error event or incomplete end came with it.
func (t *oracle) Ended() bool { return t.ended && !t.errored }

// Finished reports whether a oracleChunk said why the answer finished (OpenAI's
// finish_reason, Anthropic's stop_reason): the answer is whole, though
// what follows it (usage, [DONE], message_stop) may not have come.
func (t *oracle) Finished() bool { return t.finished && !t.errored }

// Errored reports whether an error event, response.failed or
// response.incomplete came.
func (t *oracle) Errored() bool { return t.errored }

// Events is how many content events came.
func (t *oracle) Events() int { return t.events }

// TextBytes is how many bytes of text the content events carried.
func (t *oracle) TextBytes() int { return t.textN }

// Text is the text delivered so far, if kept (see TextKept). It is valid
// until the next Write.
func (t *oracle) Text() []byte { return t.text }

// TextKept reports whether Text holds all the text delivered: false once
// it passed MaxText.
func (t *oracle) TextKept() bool { return !t.cut }

// TextOnly reports whether all content so far was text: no tool call,
// function call, tool input, refusal or thinking block, and no end that
// names a tool call (finish_reason tool_calls, stop_reason tool_use).
func (t *oracle) TextOnly() bool { return !t.notText }

// Blocks reports how many content blocks an Anthropic stream has begun
// (one past the highest index that started or was written to), and
// whether the last of them is still open.
func (t *oracle) Blocks() (n int, lastOpen bool) { return t.blocks, t.blockOpen }

// observe takes in one complete event and says what it was.
func (t *oracle) observe(name string, data []byte) Kind {
	trimmed := bytes.TrimSpace(data)
	k := t.kind(name, trimmed)
	if k == Error {
		t.errorEvent(name, trimmed)
	}
	return k
}

func (t *oracle) addText(s string) {
	t.textN += len(s)
	if t.cut {
		return
	}
	if len(t.text)+len(s) > MaxText {
		t.cut, t.text = true, nil
		return
	}
	t.text = append(t.text, s...)
}

// oracleChunk is the union of the providers' stream chunks, as far as tracking
// needs.
type oracleChunk struct {
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

// oracleAnthropicDelta is the delta of a content_block_delta or message_delta.
type oracleAnthropicDelta struct {
	Type       string `json:"type"`
	Text       string `json:"text"`
	StopReason string `json:"stop_reason"`
}

// kind says what one complete event was, and takes in what it delivered.
func (t *oracle) kind(name string, trimmed []byte) Kind {
	if string(trimmed) == "[DONE]" {
		if t.dialect == Unknown {
			return End // the end of a stream never recognised
		}
		t.ended = true
		return End
	}
	var c oracleChunk
	if name == "error" {
		return Error
	}
	if jsonscantest.KeyFault(trimmed, faultNames) {
		return Preamble
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

func (t *oracle) recognise(d Dialect) {
	if t.dialect == Unknown {
		t.dialect = d
	}
}

func (t *oracle) chat(c *oracleChunk) Kind {
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
// oracleChunk: a continuation's chunks are given them, since an SDK accumulates
// only the chunks of one completion.
func (t *oracle) ChatID() (id string, created json.RawMessage) { return t.chatID, t.chatCreated }

func (t *oracle) gemini(c *oracleChunk) Kind {
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

func (t *oracle) responses(c *oracleChunk) Kind {
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

func (t *oracle) anthropic(c *oracleChunk) Kind {
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
		var d oracleAnthropicDelta
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
		var d oracleAnthropicDelta
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
func (t *oracle) block(i int) {
	if i >= t.blocks {
		t.blocks, t.blockOpen = i+1, true
	}
}

// faultNames are the names the tracker reads, by where they lie in an
// event: "" for the top level, a name and "[]" for an array's elements.
var faultNames = jsonscantest.Paths{
	"":                             {"type", "error", "delta", "id", "created", "usage", "index", "content_block", "item", "choices", "candidates"},
	"choices[]":                    {"index", "finish_reason", "delta"},
	"choices[].delta":              {"content", "tool_calls", "refusal", "function_call"},
	"candidates[]":                 {"finishReason", "content"},
	"candidates[].content":         {"parts"},
	"candidates[].content.parts[]": {"text", "functionCall"},
	"content_block":                {"type"},
	"item":                         {"type"},
	"delta":                        {"type", "text", "stop_reason"},
}
