package relay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/rebound-go/rebound/internal/sse"
)

// splice reads a continuation's stream as the rest of the stream it
// continues: its opening dropped (a second message_start would start a
// second answer), the whitespace the caller already has taken off the
// front of its text, its end (finish reason, usage, stop reason) handed
// on. Only text is: the first event of anything else (a tool call, a
// thinking block, an end that names a tool call, an event of another
// dialect) ends it, with notText, and none of it is handed on.
type splice struct {
	r       io.Reader
	dialect sse.Dialect     // the cut stream's
	trim    string          // whitespace still to take off the text
	id      string          // the cut chat stream's id, given to the continuation's chunks
	created json.RawMessage // and its created time
	started bool            // content has come

	// An Anthropic continuation's block i is the caller's i+shift. open
	// is the caller's block the cut left open (-1: none): the
	// continuation's first block goes on with it, and it is stopped before
	// the message ends. held is the start of a new text block, held back
	// until text comes: an empty block is dropped, since the API refuses
	// one in an answer sent back to it.
	shift, open int
	begun       bool // the continuation's first block has started
	held        []byte

	tr      sse.Tracker
	buf     []byte // bytes read and not yet judged, from offset off
	off     int64
	out     []byte // events to hand on
	ready   bool   // tr.Each is set
	err     error
	refused error // the continuation answered with other than text
	notText error // the error that says so
}

func (s *splice) Read(p []byte) (int, error) {
	if !s.ready {
		s.ready = true
		s.tr.Each = s.event
	}
	for len(s.out) == 0 && s.err == nil {
		var chunk [4 << 10]byte
		n, err := s.r.Read(chunk[:])
		s.buf = append(s.buf, chunk[:n]...)
		s.tr.Write(chunk[:n])
		s.err = err
		if s.refused != nil {
			s.err = s.refused
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	if len(s.out) == 0 && s.err != nil {
		return n, s.err
	}
	return n, nil
}

// event takes the event that ends at end, of kind k.
func (s *splice) event(end int64, k sse.Kind) {
	ev := s.buf[:end-s.off]
	s.buf = s.buf[end-s.off:]
	s.off = end
	switch {
	case s.refused != nil:
		return
	case !s.tr.TextOnly() || s.tr.Dialect() != s.dialect && s.tr.Dialect() != sse.Unknown:
		s.refused = s.notText
		return
	case k == sse.Content:
		s.started = true
	}
	switch {
	case s.tr.Dialect() == sse.Anthropic:
		s.anthropic(ev)
	case k == sse.Preamble && !s.started: // the caller has the cut stream's opening
	case s.id != "":
		s.out = append(s.out, s.rewrite(ev, s.chatID)...)
	default:
		s.out = append(s.out, ev...)
	}
}

// anthropic hands on ev, an event of an Anthropic continuation, as the
// caller's stream goes on: its block numbered as the caller's, and the
// whitespace the caller has taken off its text.
func (s *splice) anthropic(ev []byte) {
	var e struct {
		Type  string `json:"type"`
		Index int    `json:"index"`
	}
	if i, j, ok := eventData(ev); ok {
		json.Unmarshal(ev[i:j], &e)
	}
	switch e.Type {
	case "message_start": // a second one would start a second answer
	case "content_block_start":
		first := !s.begun
		s.begun = true
		if !first || e.Index+s.shift != s.open {
			s.held = bytes.Clone(s.rewrite(ev, s.block(nil)))
		}
	case "content_block_delta":
		if s.held == nil && s.shift == 0 && s.trim == "" {
			s.out = append(s.out, ev...)
			return
		}
		var text string
		ev = s.rewrite(ev, s.block(&text))
		if s.held != nil {
			if text == "" {
				return // nothing yet for the block held back
			}
			s.out, s.held = append(s.out, s.held...), nil
		}
		s.out = append(s.out, ev...)
	case "content_block_stop":
		if s.held != nil { // an empty block
			s.held = nil
			return
		}
		if e.Index+s.shift == s.open {
			s.open = -1
		}
		s.out = append(s.out, s.rewrite(ev, s.block(nil))...)
	case "message_delta", "message_stop":
		s.held = nil
		if s.open >= 0 { // a continuation that wrote no block
			s.out = fmt.Appendf(s.out, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", s.open)
			s.open = -1
		}
		s.out = append(s.out, ev...)
	default:
		s.out = append(s.out, ev...)
	}
}

// block returns the change that numbers an Anthropic block event's block
// as the caller's and takes the whitespace still to trim off its text,
// and, if text is not nil, sets *text to the text left.
func (s *splice) block(text *string) func(map[string]any) bool {
	return func(v map[string]any) bool {
		changed := false
		if i, ok := v["index"].(json.Number); ok && s.shift != 0 {
			if n, err := i.Int64(); err == nil {
				v["index"], changed = n+int64(s.shift), true
			}
		}
		if s.trim != "" && s.trimText(v) {
			changed = true
		}
		if text != nil {
			inner, _ := v["delta"].(map[string]any)
			*text, _ = inner["text"].(string)
		}
		return changed
	}
}

// chatID gives a continuation's chat chunk the cut stream's id and
// created time: an SDK accumulates the chunks of one completion only.
func (s *splice) chatID(v map[string]any) bool {
	if _, ok := v["id"]; !ok {
		return false
	}
	v["id"] = s.id
	if s.created != nil {
		v["created"] = s.created
	}
	return true
}

// trimText takes the whitespace still to trim off the front of an
// Anthropic content_block_delta's text, if its text begins with it.
func (s *splice) trimText(v map[string]any) bool {
	inner, _ := v["delta"].(map[string]any)
	text, ok := inner["text"].(string)
	if !ok {
		return false
	}
	switch {
	case strings.HasPrefix(text, s.trim):
		text, s.trim = text[len(s.trim):], ""
	case strings.HasPrefix(s.trim, text):
		text, s.trim = "", s.trim[len(text):]
	default:
		s.trim = "" // the model did not write it again
		return false
	}
	inner["text"] = text
	return true
}

// eventData returns where the data of ev, on its first data: line, begins
// and ends, if it has one.
func eventData(ev []byte) (i, j int, ok bool) {
	d := bytes.Index(ev, []byte("data:"))
	if d < 0 {
		return 0, 0, false
	}
	n := bytes.IndexAny(ev[d:], "\r\n")
	if n < 0 {
		return 0, 0, false
	}
	return d + len("data:"), d + n, true
}

// rewrite returns ev with its data, a JSON object on one data: line,
// changed by change; ev as it is when it has no such data or change
// changes nothing.
func (s *splice) rewrite(ev []byte, change func(map[string]any) bool) []byte {
	i, j, ok := eventData(ev)
	if !ok {
		return ev
	}
	var v map[string]any
	d := json.NewDecoder(bytes.NewReader(bytes.TrimSpace(ev[i:j])))
	d.UseNumber()
	if d.Decode(&v) != nil || !change(v) {
		return ev
	}
	var out bytes.Buffer
	out.Write(ev[:i-len("data:")])
	out.WriteString("data: ")
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // it decoded: it encodes; Encode ends the line
	out.Write(ev[j+1:])
	return out.Bytes()
}
