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
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"
)

// IsStream reports whether a response's header says its body is an event
// stream (Content-Type text/event-stream, as mime.ParseMediaType reads it
// without an error).
func IsStream(h http.Header) bool {
	stream, valid := StreamType(h)
	return stream && valid
}

// StreamType reports whether the media type of a response's Content-Type
// is text/event-stream, and whether the whole value is valid, as
// mime.ParseMediaType's media type and error say. A value without
// parameters, in ASCII, the common case, is read without an allocation.
func StreamType(h http.Header) (stream, valid bool) {
	v := h.Get("Content-Type")
	if !strings.Contains(v, ";") && ascii(v) {
		base := strings.Trim(v, " \t\n\v\f\r")
		if strings.EqualFold(base, "text/event-stream") {
			return true, true
		}
		if typ, sub, ok := strings.Cut(base, "/"); ok && token(typ) && token(sub) {
			return false, true
		}
	}
	mt, _, err := mime.ParseMediaType(v)
	return mt == "text/event-stream", err == nil
}

// ascii reports whether s is all ASCII.
func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// token reports whether s is a token of RFC 2045 (as package mime reads
// one): a media type's type or subtype.
func token(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?=`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

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

// Head is the beginning of a stream as Peek read it: the bytes, and the
// Tracker that read them with the end and kind of each complete event
// among them, so that whoever takes the stream over goes on from there
// rather than reading the same events again.
type Head struct {
	Read    []byte
	Tracker *Tracker // has been fed Read, and its Each is nil; nil: none
	Events  []Seen
}

// Seen is one complete event: the offset just past it, and its kind, as
// a Tracker's Each is told them.
type Seen struct {
	End  int64
	Kind Kind
}

// peekRead is the room a read of the look ahead is given, at least half
// of it free.
const peekRead = 4 << 10

// Peek reads an event stream up to its first content event, at most limit
// bytes. It returns what it read and, if the stream failed before any
// content, why: an *ErrorEvent, ErrEnded, or the read error. A stream with
// no content within limit bytes is passed on as it is: the error is nil.
// An error event's data is kept up to maxData bytes. What an event is, is
// the Tracker's to say; an event of a shape no dialect has is passed on as
// content, so that a stream nobody recognises is handed over rather than
// retried.
func Peek(body io.Reader, limit, maxData int) (Head, error) {
	p := &peek{maxData: maxData}
	p.events = p.first[:0]
	p.t.Each = p.saw
	r := io.LimitReader(body, int64(limit))
	// Each read lands in seen's spare room, where it stays: no buffer of
	// its own to allocate, nothing copied, and the room left over is
	// for whoever takes Read on (relay.Stream reads on into it).
	for !p.decided {
		if p.seen.Available() < peekRead/2 {
			p.seen.Grow(peekRead)
		}
		room := p.seen.AvailableBuffer()
		n, err := r.Read(room[:cap(room)])
		p.seen.Write(room[:n]) // where it already lies: the length moves, no byte does
		p.t.Write(room[:n])
		switch {
		case p.decided:
		case err == nil:
		case p.seen.Len() >= limit:
			return p.head(), nil
		case err == io.EOF:
			return p.head(), ErrEnded
		default:
			return p.head(), err
		}
	}
	return p.head(), p.failure
}

// peek is a look ahead under way: one allocation, whose tracker the
// stream handed over goes on with.
type peek struct {
	t       Tracker
	seen    bytes.Buffer
	events  []Seen
	first   [8]Seen // the events of a short look ahead, without a slice of their own
	decided bool
	failure error
	maxData int
}

// saw is the tracker's Each while the look ahead decides.
func (p *peek) saw(end int64, k Kind) {
	p.events = append(p.events, Seen{end, k})
	if p.decided {
		return
	}
	switch {
	case k == Content, k == Preamble && p.t.Dialect() == Unknown:
		p.decided = true
	case k == Error:
		name, data, _ := p.t.ErrorEvent()
		p.decided, p.failure = true, &ErrorEvent{Name: name, Data: data[:min(len(data), p.maxData)]}
	case k == End:
		p.decided, p.failure = true, ErrEnded
	}
}

func (p *peek) head() Head {
	p.t.Each = nil
	return Head{Read: p.seen.Bytes(), Tracker: &p.t, Events: p.events}
}

func nonEmpty(raw []byte) bool {
	switch string(bytes.TrimSpace(raw)) {
	case "", "null", `""`, "[]", "{}":
		return false
	}
	return true
}
