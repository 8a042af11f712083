// Package sse looks into a server-sent event stream up to its first
// content event, the way rebound's Transport decides whether a stream that
// answered 200 may still be retried: an in-band error event (OpenAI's error
// chunk, Anthropic's overloaded_error, Gemini's error), an end, or a break
// before any content is a failed attempt; from the first content event on,
// the stream is the caller's.
//
// After the hand-over, a Tracker follows the stream as the caller reads
// it: its dialect, where its last complete event ends, whether its end
// marker came, and the content and text delivered, so that the stream is
// handed on whole events at a time and its end judged honestly.
//
// Preamble (OpenAI chunks with only a role, response.created and the like,
// Anthropic's message_start, ping and empty content_block_start) is safe
// to retry after. Lines may end in CRLF, LF or a bare CR, as the
// specification allows.
package sse

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// ErrEnded is the failure of a stream that ended, normally or not, before
// any content: the provider gave up mid-answer.
var ErrEnded = errors.New("event stream ended before any content")

// ErrorEvent is an error event in a stream: its name ("error"), if it had
// one, and its data.
type ErrorEvent struct {
	Name string
	Data []byte
}

func (e *ErrorEvent) Error() string { return "error event in stream" }

// eventKind is what one server-sent event means for retrying.
type eventKind uint8

const (
	eventPreamble eventKind = iota // before the answer: safe to retry after
	eventContent                   // the answer has begun
	eventError                     // an in-band error
	eventEnd                       // the stream's normal end
)

// Peek reads an event stream up to its first content event, at most limit
// bytes. It returns what it read and, if the stream failed before any
// content, why: an *ErrorEvent, ErrEnded, or the read error. A stream with
// no content within limit bytes is passed on as it is: the error is nil.
// An error event's data is kept up to maxData bytes.
func Peek(body io.Reader, limit, maxData int) ([]byte, error) {
	var seen bytes.Buffer
	r := lineReader{r: bufio.NewReader(io.TeeReader(io.LimitReader(body, int64(limit)), &seen))}
	var name string
	var data []byte
	// stopped says what a read error means: the look ahead's limit (pass
	// the stream on), the stream's end, or its break.
	stopped := func(err error) ([]byte, error) {
		switch {
		case seen.Len() >= limit:
			return seen.Bytes(), nil
		case err == io.EOF:
			return seen.Bytes(), ErrEnded
		}
		return seen.Bytes(), err
	}
	for {
		line, err := r.next()
		if err != nil && len(line) == 0 {
			return stopped(err)
		}
		switch {
		case len(line) == 0: // the end of an event
			if data != nil || name != "" {
				switch kindOfEvent(name, data) {
				case eventContent:
					return seen.Bytes(), nil
				case eventError:
					return seen.Bytes(), &ErrorEvent{Name: name, Data: bytes.Clone(data[:min(len(data), maxData)])}
				case eventEnd:
					return seen.Bytes(), ErrEnded
				}
			}
			name, data = "", nil
		case bytes.HasPrefix(line, []byte("event:")):
			name = string(bytes.TrimSpace(line[len("event:"):]))
		case bytes.HasPrefix(line, []byte("data:")):
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(line[len("data:"):], []byte(" "))...)
			if data == nil {
				data = []byte{}
			}
		}
		if err != nil { // a last line without its newline
			return stopped(err)
		}
	}
}

// lineReader reads the lines of an event stream, which may end in CRLF,
// LF or a bare CR (the SSE specification allows all three).
type lineReader struct {
	r      *bufio.Reader
	line   []byte
	skipLF bool // the last line ended in CR: an LF right after it ends nothing
}

// next returns the next line without its end; a last line without one
// comes with the read error. The line is valid until the next call.
func (l *lineReader) next() ([]byte, error) {
	l.line = l.line[:0]
	for {
		buf, err := l.r.Peek(max(1, l.r.Buffered()))
		if len(buf) == 0 {
			return l.line, err
		}
		if l.skipLF {
			l.skipLF = false
			if buf[0] == '\n' {
				l.r.Discard(1)
				continue
			}
		}
		i := bytes.IndexAny(buf, "\r\n")
		if i < 0 {
			l.line = append(l.line, buf...)
			l.r.Discard(len(buf))
			continue
		}
		l.line = append(l.line, buf[:i]...)
		l.skipLF = buf[i] == '\r'
		l.r.Discard(i + 1)
		return l.line, nil
	}
}

// sseData is the union of the providers' stream chunks, as far as telling
// preamble from content needs.
type sseData struct {
	Type    string          `json:"type"`
	Error   json.RawMessage `json:"error"`
	Delta   json.RawMessage `json:"delta"`
	Choices []struct {
		Delta struct {
			Content      string          `json:"content"`
			ToolCalls    json.RawMessage `json:"tool_calls"`
			Refusal      string          `json:"refusal"`
			FunctionCall json.RawMessage `json:"function_call"`
		} `json:"delta"`
	} `json:"choices"`
	Candidates []struct {
		Content struct {
			Parts []struct {
				Text         string          `json:"text"`
				FunctionCall json.RawMessage `json:"functionCall"`
			} `json:"parts"`
		} `json:"content"`
	} `json:"candidates"`
}

// kindOfEvent tells preamble from content in OpenAI's chat and Responses
// streams, Anthropic's and Gemini's: content begins with the first
// non-empty text, tool call or refusal delta (Anthropic: the first
// content_block_delta); an unknown shape counts as content, so that a
// stream nobody recognises is passed on rather than retried.
func kindOfEvent(name string, data []byte) eventKind {
	switch name {
	case "error":
		return eventError
	case "content_block_delta":
		return eventContent
	case "message_stop":
		return eventEnd
	}
	trimmed := bytes.TrimSpace(data)
	if string(trimmed) == "[DONE]" {
		return eventEnd
	}
	var d sseData
	if len(trimmed) == 0 || json.Unmarshal(trimmed, &d) != nil {
		return eventContent
	}
	switch {
	case len(d.Error) > 0 && string(d.Error) != "null", d.Type == "error", d.Type == "response.failed":
		return eventError
	case d.Type == "content_block_delta":
		return eventContent
	case d.Type == "message_stop", d.Type == "response.completed", d.Type == "response.incomplete":
		return eventEnd
	case strings.HasPrefix(d.Type, "response.") && strings.HasSuffix(d.Type, ".delta"):
		if nonEmpty(d.Delta) {
			return eventContent
		}
		return eventPreamble
	case d.Type != "":
		return eventPreamble // message_start, ping, content_block_start, response.created, …
	}
	for _, c := range d.Choices {
		if c.Delta.Content != "" || c.Delta.Refusal != "" || nonEmpty(c.Delta.ToolCalls) || nonEmpty(c.Delta.FunctionCall) {
			return eventContent
		}
	}
	for _, c := range d.Candidates {
		for _, p := range c.Content.Parts {
			if p.Text != "" || nonEmpty(p.FunctionCall) {
				return eventContent
			}
		}
	}
	if len(d.Choices) > 0 || len(d.Candidates) > 0 {
		return eventPreamble
	}
	if nonEmpty(d.Delta) {
		return eventContent // {"delta": "…"}: a plain stream
	}
	return eventPreamble
}

func nonEmpty(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != `""` && s != "[]" && s != "{}"
}
