package sse

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/rebound-go/rebound/internal/jsonscan"
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

// kind says what one complete event was, and takes in what it delivered.
func (t *Tracker) kind(name, trimmed []byte) Kind {
	if string(trimmed) == "[DONE]" {
		if t.dialect == Unknown {
			return End // the end of a stream never recognised
		}
		t.ended = true
		return End
	}
	if string(name) == "error" {
		return Error
	}
	e := &t.ev
	if cap(t.typ) > maxKeptBytes || cap(t.unquoted) > maxKeptBytes {
		t.typ, t.unquoted = nil, nil
	}
	if !e.read(&t.scan, trimmed) {
		return Preamble // not JSON, or a field given twice: nothing a tracked dialect sends
	}
	// A field of the wrong type was skipped, the rest read: a tool call
	// is one, whatever else is off in it.
	typ := t.str(&t.typ, trimmed, e.typ)
	if nonEmpty(t.raw(trimmed, e.errRaw)) || string(typ) == "error" {
		return Error
	}
	switch {
	case e.choicesSet:
		return t.chat(trimmed, e)
	case e.candidatesSet:
		return t.gemini(trimmed, e)
	case bytes.HasPrefix(typ, []byte("response.")):
		return t.responses(trimmed, e, typ)
	case len(typ) > 0:
		return t.anthropic(trimmed, e, typ)
	case nonEmpty(t.raw(trimmed, e.delta)):
		t.recognise(Plain)
		if data := trimmed[e.delta.Lo:e.delta.Hi]; data[0] == '"' {
			t.addText(t.str(&t.unquoted, trimmed, e.delta))
		} else {
			t.notText = true
		}
		t.events++
		return Content
	}
	return Preamble
}

// str returns the text of the string at v in data, unquoted into *buf if
// it has to be; nil if there is none.
func (t *Tracker) str(buf *[]byte, data []byte, v span) []byte {
	if !v.Set() {
		return nil
	}
	q := data[v.Lo:v.Hi]
	if bytes.IndexByte(q, '\\') < 0 && utf8.Valid(q) {
		return q[1 : len(q)-1]
	}
	*buf, _ = jsonscan.AppendText((*buf)[:0], q)
	return *buf
}

// raw returns the bytes of the value at v in data; nil if there is none,
// as a json.RawMessage of a field that was absent is.
func (t *Tracker) raw(data []byte, v span) []byte {
	if !v.Set() {
		return nil
	}
	return data[v.Lo:v.Hi]
}

func (t *Tracker) recognise(d Dialect) {
	if t.dialect == Unknown {
		t.dialect = d
	}
}

func (t *Tracker) chat(data []byte, e *event) Kind {
	t.recognise(Chat)
	if t.chatID == "" && e.id.Set() {
		if id := t.str(&t.unquoted, data, e.id); len(id) > 0 {
			t.chatID, t.chatCreated = string(id), bytes.Clone(t.raw(data, e.created))
		}
	}
	k := Preamble
	if nonEmpty(t.raw(data, e.usage)) {
		k = Finish
	}
	for i := range e.choices {
		ch := &e.choices[i]
		content := false
		if ch.content.Len() > len(`""`) {
			t.addText(t.str(&t.unquoted, data, ch.content))
			content = true
		}
		if ch.refusal.Len() > len(`""`) || nonEmpty(t.raw(data, ch.toolCalls)) || nonEmpty(t.raw(data, ch.functionCall)) {
			t.notText = true
			content = true
		}
		finish := t.str(&t.unquoted, data, ch.finish)
		switch {
		case content:
			k = Content
		case len(finish) > 0:
			k = Finish
		}
		if string(finish) == "tool_calls" || string(finish) == "function_call" {
			t.notText = true
		}
		// A choice is finished by its finish_reason, and open again if
		// content follows it.
		was, seen := t.choice(ch.index)
		done := len(finish) > 0 || was && !content
		if !seen || was != done {
			t.setChoice(ch.index, done)
		}
		switch {
		case !seen && !done, seen && was && !done:
			t.openChoices++
		case seen && !was && done:
			t.openChoices--
		}
	}
	t.finished = t.seenChoices > 0 && t.openChoices == 0
	if k == Content {
		t.events++
	}
	return k
}

// ChatID returns the id and created time of an OpenAI chat stream's first
// chunk: a continuation's chunks are given them, since an SDK accumulates
// only the chunks of one completion.
func (t *Tracker) ChatID() (id string, created json.RawMessage) { return t.chatID, t.chatCreated }

// choiceState is what a chat stream's choice has said of itself.
type choiceState uint8

const (
	choiceUnseen choiceState = iota
	choiceOpen
	choiceDone
)

// choice reports whether the chat stream's choice i is finished, and
// whether it has been seen at all.
func (t *Tracker) choice(i int) (done, seen bool) {
	if i == 0 {
		return t.choice0 == choiceDone, t.choice0 != choiceUnseen
	}
	done, seen = t.choices[i]
	return done, seen
}

// setChoice records whether choice i is finished.
func (t *Tracker) setChoice(i int, done bool) {
	if _, seen := t.choice(i); !seen {
		t.seenChoices++
	}
	if i == 0 {
		t.choice0 = choiceOpen
		if done {
			t.choice0 = choiceDone
		}
		return
	}
	if t.choices == nil {
		t.choices = map[int]bool{}
	}
	t.choices[i] = done
}

func (t *Tracker) gemini(data []byte, e *event) Kind {
	t.recognise(Gemini)
	k := Preamble
	for _, cand := range e.candidates {
		for _, p := range e.parts[cand.lo:cand.hi] {
			if p.text.Len() > len(`""`) {
				t.addText(t.str(&t.unquoted, data, p.text))
				k = Content
			}
			if nonEmpty(t.raw(data, p.functionCall)) {
				t.notText = true
				k = Content
			}
		}
		if cand.finish.Len() > len(`""`) {
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

func (t *Tracker) responses(data []byte, e *event, typ []byte) Kind {
	t.recognise(Responses)
	switch string(typ) {
	case "response.completed":
		t.ended = true
		return End
	case "response.failed", "response.incomplete":
		t.ended = true
		return Error
	}
	if string(typ) == "response.output_item.added" {
		if item := t.str(&t.unquoted, data, e.itemType); string(item) != "message" && string(item) != "reasoning" {
			t.notText = true // a function call, a hosted tool's call
		}
	}
	if !bytes.HasSuffix(typ, []byte(".delta")) || !nonEmpty(t.raw(data, e.delta)) {
		return Preamble
	}
	switch string(typ) {
	case "response.output_text.delta":
		if data[e.delta.Lo] == '"' {
			t.addText(t.str(&t.unquoted, data, e.delta))
		}
	case "response.reasoning_text.delta", "response.reasoning_summary_text.delta":
		// thinking: content, though not the answer's text
	default: // function call arguments, refusals, tool input
		t.notText = true
	}
	t.events++
	return Content
}

func (t *Tracker) anthropic(data []byte, e *event, typ []byte) Kind {
	switch string(typ) {
	case "content_block_start":
		t.recognise(Anthropic)
		if b := t.str(&t.unquoted, data, e.blockType); len(b) > 0 && string(b) != "text" {
			t.notText = true // a tool_use, a thinking block: not text to continue
		}
		t.block(e.index)
		return Preamble
	case "content_block_stop":
		t.recognise(Anthropic)
		if e.index == t.blocks-1 {
			t.blockOpen = false
		}
		return Finish
	case "message_delta":
		t.recognise(Anthropic)
		stop := e.stopReason
		if r := t.str(&t.unquoted, data, stop); string(r) == "tool_use" || string(r) == "pause_turn" {
			t.notText = true // the turn is a tool's: pause_turn, a server tool's
		}
		t.finished = stop.Len() > len(`""`)
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
		t.block(e.index)
		if string(t.str(&t.unquoted, data, e.deltaType)) == "text_delta" {
			t.addText(t.str(&t.unquoted, data, e.deltaText))
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
