package rebound

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Limits of the look ahead into an event stream, unless a Transport says
// otherwise.
const (
	DefaultStreamLookaheadBytes = 64 << 10
	DefaultStreamLookahead      = 2 * time.Minute
)

// ErrStreamStalled is the failure of an event stream that went silent for
// the Transport's StreamLookahead before any content. It is transient.
var ErrStreamStalled = errors.New("rebound: event stream went silent before any content")

// errStreamEnded is the failure of an event stream that ended before any
// content: the provider gave up mid-answer.
var errStreamEnded = fmt.Errorf("rebound: event stream ended before any content: %w", io.ErrUnexpectedEOF)

// StreamError is an error event inside an event stream that answered 200:
// OpenAI's {"error": …} chunk, Anthropic's "event: error" (an
// overloaded_error, say), Gemini's error chunk. Classify judges its data as
// it would an error body.
type StreamError struct {
	// Event is the event's name ("error"), if it had one.
	Event string
	// Data is the event's data, at most MaxErrorBody bytes.
	Data []byte
}

func (e *StreamError) Error() string {
	return "rebound: error event in stream: " + snippet(e.Data)
}

func isEventStream(resp *http.Response) bool {
	mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return err == nil && mt == "text/event-stream"
}

// eventKind is what one server-sent event means for retrying.
type eventKind uint8

const (
	eventPreamble eventKind = iota // before the answer: safe to retry after
	eventContent                   // the answer has begun
	eventError                     // an in-band error
	eventEnd                       // the stream's normal end
)

// peekStream reads an event stream up to its first content event, at most
// limit bytes. It returns what it read and, if the stream failed before
// any content, why: a *StreamError, errStreamEnded, or the read error. A
// stream with no content within limit bytes is passed on as it is.
func peekStream(body io.Reader, limit int) ([]byte, error) {
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
			return seen.Bytes(), errStreamEnded
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
					return seen.Bytes(), &StreamError{Event: name, Data: bytes.Clone(data[:min(len(data), MaxErrorBody)])}
				case eventEnd:
					return seen.Bytes(), errStreamEnded
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

// lookahead peeks into an event-stream response before the Transport
// hands it over: it returns the bytes read, as they came, and the stream's
// failure, if it failed before any content. A stream silent for the
// Transport's StreamLookahead before its first content event (not a byte,
// not a keep-alive) has its body closed and fails with ErrStreamStalled;
// one that keeps sending, however slow to its answer, is not stalled. A
// gzip or deflate stream (as a request that set Accept-Encoding itself
// gets) is decoded to be looked into, and handed over encoded.
func (t *Transport) lookahead(resp *http.Response) ([]byte, error) {
	limit, wait := t.StreamLookaheadBytes, t.StreamLookahead
	if limit <= 0 {
		limit = DefaultStreamLookaheadBytes
	}
	if wait <= 0 {
		wait = DefaultStreamLookahead
	}
	// One state decides the race between the timer and the look ahead:
	// whoever moves it first wins, so a body handed over is never closed.
	const (
		looking int32 = iota
		done
		stalled
	)
	var state atomic.Int32
	body := &heardBody{r: resp.Body, start: time.Now()}
	var timer *time.Timer
	timer = time.AfterFunc(wait, func() {
		if silent := body.silence(); silent < wait {
			timer.Reset(wait - silent)
			return
		}
		if state.CompareAndSwap(looking, stalled) {
			resp.Body.Close() // unblocks the read below
		}
	})
	defer timer.Stop()
	read, err := t.peek(resp, body, limit)
	if !state.CompareAndSwap(looking, done) {
		return read, ErrStreamStalled
	}
	return read, err
}

// peek reads body, resp's, up to its first content event: decoded if resp
// is encoded, and returns the bytes read as they came.
func (t *Transport) peek(resp *http.Response, body io.Reader, limit int) ([]byte, error) {
	if resp.Uncompressed {
		return peekStream(body, limit)
	}
	var raw bytes.Buffer
	decoded, err := decoder(resp.Header.Get("Content-Encoding"), io.TeeReader(body, &raw))
	switch {
	case decoded == nil && err == nil:
		return peekStream(body, limit)
	case errors.Is(err, gzip.ErrHeader) || errors.Is(err, zlib.ErrHeader):
		return raw.Bytes(), nil // not what its header says: the caller's to read
	case err == io.EOF:
		return raw.Bytes(), errStreamEnded
	case err != nil:
		return raw.Bytes(), err
	}
	_, err = peekStream(decoded, limit)
	return raw.Bytes(), err
}

// heardBody is a body read under a watch for silence: it notes when it
// last gave bytes.
type heardBody struct {
	r     io.Reader
	start time.Time
	heard atomic.Int64 // nanoseconds from start to the last read that gave bytes
}

func (b *heardBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.heard.Store(int64(time.Since(b.start)))
	}
	return n, err
}

// silence is how long the body has given nothing.
func (b *heardBody) silence() time.Duration {
	return time.Since(b.start) - time.Duration(b.heard.Load())
}

// streamBody is an event stream handed to the caller: the bytes the look
// ahead read, then the rest. It holds the breaker's permit, if any, and
// hands it back once, when the stream ends: success at its end, failure if
// it broke, nothing learned if the caller closed it early.
type streamBody struct {
	io.Reader
	body   io.ReadCloser
	cancel func()
	held   lease
	once   sync.Once
}

func (b *streamBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	switch {
	case err == io.EOF:
		b.finish(OutcomeSuccess)
	case err != nil:
		b.finish(OutcomeFailure)
	}
	return n, err
}

func (b *streamBody) Close() error {
	err := b.body.Close()
	b.finish(OutcomeIgnored)
	return err
}

func (b *streamBody) finish(o Outcome) {
	b.once.Do(func() {
		b.held.done(o)
		b.cancel()
	})
}
