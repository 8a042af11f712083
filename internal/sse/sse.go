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
	"bytes"
	"encoding/json"
	"errors"
	"io"
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

// Peek reads an event stream up to its first content event, at most limit
// bytes. It returns what it read and, if the stream failed before any
// content, why: an *ErrorEvent, ErrEnded, or the read error. A stream with
// no content within limit bytes is passed on as it is: the error is nil.
// An error event's data is kept up to maxData bytes. What an event is, is
// the Tracker's to say; an event of a shape no dialect has is passed on as
// content, so that a stream nobody recognises is handed over rather than
// retried.
func Peek(body io.Reader, limit, maxData int) ([]byte, error) {
	var (
		seen    bytes.Buffer
		t       Tracker
		decided bool
		failure error
	)
	t.Each = func(_ int64, k Kind) {
		if decided {
			return
		}
		switch {
		case k == Content, k == Preamble && t.Dialect() == Unknown:
			decided = true
		case k == Error:
			name, data, _ := t.ErrorEvent()
			decided, failure = true, &ErrorEvent{Name: name, Data: data[:min(len(data), maxData)]}
		case k == End:
			decided, failure = true, ErrEnded
		}
	}
	r := io.LimitReader(body, int64(limit))
	var buf [4 << 10]byte
	for !decided {
		n, err := r.Read(buf[:])
		seen.Write(buf[:n])
		t.Write(buf[:n])
		switch {
		case decided:
		case err == nil:
		case seen.Len() >= limit:
			return seen.Bytes(), nil
		case err == io.EOF:
			return seen.Bytes(), ErrEnded
		default:
			return seen.Bytes(), err
		}
	}
	return seen.Bytes(), failure
}

func nonEmpty(raw json.RawMessage) bool {
	s := string(bytes.TrimSpace(raw))
	return s != "" && s != "null" && s != `""` && s != "[]" && s != "{}"
}
