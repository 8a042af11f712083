package sse

import (
	"bytes"
	"encoding/json"

	"github.com/rebound-go/rebound/internal/jsonscan"
)

// Kind is what one event means to a stream: its preamble, its answer, the
// answer's end, the stream's normal end or an in-band error.
type Kind uint8

const (
	Preamble Kind = iota // before the answer, or beside it (ping, keep-alive)
	Content              // part of the answer
	End                  // the stream's normal end
	Error                // an in-band error, or an end that says the answer is not whole
	// Finish ends the answer, or one of its parts, ahead of the stream's
	// end: OpenAI's chunk with a finish_reason or the usage, Anthropic's
	// content_block_stop and message_delta.
	Finish
)

// MaxText bounds how much text a Tracker keeps; past it Text is no longer
// kept (TextKept reports false), though TextBytes goes on counting.
const MaxText = 1 << 20

// Tracker follows an event stream as it is read, fed the bytes in any
// split, and tells where its last complete event ends, so that whoever
// hands the stream on can hand over whole events only. It recognises the
// dialect from the events themselves and counts what was delivered.
//
// A Tracker is not safe for concurrent use.
type Tracker struct {
	// Each, if set, is called at the end of every complete event with
	// the offset just past it (counted from the first byte fed) and its
	// kind: enough to cut a stream into events and drop its preamble.
	Each func(end int64, k Kind)

	dialect     Dialect
	ended       bool // the end marker was seen
	errored     bool // an error event, or an end that says the answer is not whole
	finished    bool // a chunk said why the answer finished (finish_reason)
	events      int  // content events
	textN       int
	text        []byte
	cut         bool         // text passed MaxText and is no longer kept
	notText     bool         // some content was not text, or an end named a tool call
	blocks      int          // an Anthropic stream's content blocks: one past the highest index
	blockOpen   bool         // and whether the last of them is open
	choice0     choiceState  // a chat stream's choice 0, nearly always its only one: no map for it
	choices     map[int]bool // its other choices by index: finished or not
	seenChoices int          // how many choices it has had
	openChoices int          // how many of them are not finished
	chatID      string
	chatCreated json.RawMessage
	errName     string
	errData     []byte // the first error event's, while errored

	ev       event            // the last event's JSON, as read
	scan     jsonscan.Scanner // reads it
	typ      []byte           // its type, unquoted if it had to be
	unquoted []byte           // a string of it, unquoted if it had to be

	fed, complete int64
	line          []byte
	name          []byte
	data          []byte
	hasData       bool
	afterCR       bool // the last byte fed was a CR: an LF next belongs to it
	blankCR       bool // that CR ended a blank line, and an event: its LF, if it comes, goes with it
}

// Write feeds the tracker the next bytes of the stream. It never fails.
func (t *Tracker) Write(p []byte) (int, error) {
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
		j := lineEnd(p[i:])
		if j < 0 {
			t.line = append(t.line, p[i:]...)
			t.fed += int64(len(p) - i)
			break
		}
		line := p[i : i+j] // a line whole in p is read where it lies
		if len(t.line) > 0 {
			t.line = append(t.line, line...)
			line = t.line
		}
		t.afterCR = p[i+j] == '\r'
		i += j + 1
		t.fed += int64(j + 1)
		if len(line) > 0 {
			t.takeLine(line)
			t.line = t.line[:0]
			continue
		}
		t.blankCR = t.afterCR
		t.dispatch()
	}
	return len(p), nil
}

// lineEnd returns the index of the first CR or LF in p, or -1.
func lineEnd(p []byte) int {
	lf := bytes.IndexByte(p, '\n')
	if lf < 0 {
		return bytes.IndexByte(p, '\r')
	}
	if cr := bytes.IndexByte(p[:lf], '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// takeLine takes in the line just read, without its end.
func (t *Tracker) takeLine(line []byte) {
	switch {
	case bytes.HasPrefix(line, []byte("event:")):
		t.name = append(t.name[:0], bytes.TrimSpace(line[len("event:"):])...)
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
func (t *Tracker) dispatch() {
	t.complete = t.fed
	if !t.hasData && len(t.name) == 0 {
		return // a comment or a stray blank line
	}
	k := t.observe(t.name, t.data)
	t.name, t.data, t.hasData = t.name[:0], t.data[:0], false
	if t.Each != nil {
		t.Each(t.complete, k)
	}
}

// maxErrorData bounds the data kept of an error event.
const maxErrorData = 64 << 10

// errorEvent notes an in-band error event, the first one's name and data
// kept.
func (t *Tracker) errorEvent(name, data []byte) {
	if !t.errored {
		t.errName, t.errData = string(name), bytes.Clone(data[:min(len(data), maxErrorData)])
	}
	t.errored = true
}

// ErrorEvent returns the name and data (at most 64 KiB) of the first
// in-band error event, if one came.
func (t *Tracker) ErrorEvent() (name string, data []byte, ok bool) {
	return t.errName, t.errData, t.errored && t.errData != nil
}

// Rewind forgets what was fed past offset to, the end of a complete
// event: the stream is to go on from there with another stream's events.
// The end, error or finish seen past it are forgotten with it; what it
// delivered before is kept.
func (t *Tracker) Rewind(to int64) {
	t.fed, t.complete = to, to
	t.line, t.name, t.data = t.line[:0], t.name[:0], t.data[:0]
	t.hasData, t.afterCR, t.blankCR = false, false, false
	t.ended, t.errored, t.finished = false, false, false
	t.errName, t.errData = "", nil
}

// Complete is the offset just past the last complete event fed: what may
// be handed on without giving half an event.
func (t *Tracker) Complete() int64 { return t.complete }

// Dialect is the stream's dialect, once recognised.
func (t *Tracker) Dialect() Dialect { return t.dialect }

// Ended reports whether the stream's end marker was seen ([DONE],
// response.completed, message_stop, a Gemini candidate's finishReason),
// and no error event or incomplete end came with it.
func (t *Tracker) Ended() bool { return t.ended && !t.errored }

// Finished reports whether a chunk said why the answer finished (OpenAI's
// finish_reason, Anthropic's stop_reason): the answer is whole, though
// what follows it (usage, [DONE], message_stop) may not have come.
func (t *Tracker) Finished() bool { return t.finished && !t.errored }

// Errored reports whether an error event, response.failed or
// response.incomplete came.
func (t *Tracker) Errored() bool { return t.errored }

// Events is how many content events came.
func (t *Tracker) Events() int { return t.events }

// TextBytes is how many bytes of text the content events carried.
func (t *Tracker) TextBytes() int { return t.textN }

// Text is the text delivered so far, if kept (see TextKept). It is valid
// until the next Write.
func (t *Tracker) Text() []byte { return t.text }

// TextKept reports whether Text holds all the text delivered: false once
// it passed MaxText.
func (t *Tracker) TextKept() bool { return !t.cut }

// TextOnly reports whether all content so far was text: no tool call,
// function call, tool input, refusal or thinking block, and no end that
// names a tool call (finish_reason tool_calls, stop_reason tool_use).
func (t *Tracker) TextOnly() bool { return !t.notText }

// Blocks reports how many content blocks an Anthropic stream has begun
// (one past the highest index that started or was written to), and
// whether the last of them is still open.
func (t *Tracker) Blocks() (n int, lastOpen bool) { return t.blocks, t.blockOpen }

// observe takes in one complete event and says what it was.
func (t *Tracker) observe(name, data []byte) Kind {
	trimmed := bytes.TrimSpace(data)
	k := t.kind(name, trimmed)
	if k == Error {
		t.errorEvent(name, trimmed)
	}
	return k
}

func (t *Tracker) addText(s []byte) {
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
