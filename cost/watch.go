package cost

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"github.com/rebound-go/rebound/internal/sse"
	"github.com/rebound-go/rebound/internal/usage"
)

// WatchUsage replaces resp.Body with one that reads the token usage the
// response reports as the caller reads it (a JSON body, or an event
// stream's usage events, in the dialects of internal/usage's table:
// OpenAI's Chat Completions and Responses, Anthropic's Messages, Gemini,
// Bedrock's Converse), and calls done once, when the body ends or is
// closed, with the largest counts seen of each kind (input read afresh,
// read from the cache, written into it, output) and whether they are
// final: a whole body's, or
// a stream's final usage event (OpenAI's usage chunk, Anthropic's
// message_delta, response.completed, a finished Gemini chunk). A stream
// cut short, or read only in part, has no final count. WithCaps settles an
// attempt so; rebound proxy logs the tokens of each request so.
func WatchUsage(resp *http.Response, done func(u Usage, final bool)) {
	stream, _ := sse.StreamType(resp.Header) // read as a stream even if its parameters are not valid
	resp.Body = &usageBody{body: resp.Body, done: done, stream: stream}
}

// usageBody is a response body that reads the usage the response reports
// as the caller reads it, and tells done when it ends or is closed.
type usageBody struct {
	body   io.ReadCloser
	done   func(u Usage, final bool)
	stream bool // an event stream, read a line at a time; else one JSON document

	mu    sync.Mutex // guards the fields below: Close may come from another goroutine
	line  []byte     // the stream's line so far, or the document so far
	final bool       // a stream's final usage came
	usage Usage
	found bool
	ended bool // done was called
}

// maxUsageLine bounds a line of a stream, or a whole JSON document, kept to
// be read for its usage; past it, the usage it holds is not seen (and the
// attempt settles with its hold).
const maxUsageLine = 4 << 20

func (b *usageBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.mu.Lock()
	b.take(p[:n])
	b.mu.Unlock()
	if err != nil {
		b.end()
	}
	return n, err
}

func (b *usageBody) Close() error {
	err := b.body.Close()
	b.end()
	return err
}

// take reads p, the next bytes of the body. b.mu is held.
func (b *usageBody) take(p []byte) {
	if !b.stream {
		if len(b.line)+len(p) <= maxUsageLine {
			b.line = append(b.line, p...)
		} else {
			b.line = b.line[:0:0] // too long to keep: its usage is not seen
		}
		return
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			if len(b.line)+len(p) <= maxUsageLine {
				b.line = append(b.line, p...)
			}
			return
		}
		b.line = append(b.line, p[:i]...)
		b.event(b.line)
		b.line, p = b.line[:0], p[i+1:]
	}
}

// event reads one line of an event stream.
func (b *usageBody) event(line []byte) {
	data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
	if ok && bytes.Contains(data, []byte(`"usage`)) { // usage, usageMetadata
		b.read(bytes.TrimSpace(data))
	}
}

// usageKey begins every key usage is reported under ("usage",
// "usageMetadata"), nested or not.
var usageKey = []byte(`"usage`)

// end tells done of the usage, once the body has ended or been closed.
func (b *usageBody) end() {
	b.mu.Lock()
	if b.ended {
		b.mu.Unlock()
		return
	}
	b.ended = true
	if !b.stream && len(b.line) > 0 {
		b.read(b.line)
		b.final = b.found // a whole document's usage is its last word
		b.line = nil
	}
	u, final := b.usage, b.final
	b.mu.Unlock()
	b.done(u, final)
}

// read takes the usage a JSON document (a body, an event's data, or an
// array of Gemini's chunks) reports, in any of the dialects. Counts are
// cumulative in every dialect (Anthropic's message_delta, Gemini's
// chunks), so the largest of each kind seen is the attempt's. A document
// whose usage cannot be told (internal/usage's Read) says nothing.
func (b *usageBody) read(doc []byte) {
	if !bytes.Contains(doc, usageKey) {
		return // most of a stream's events: not worth decoding
	}
	if d := bytes.TrimLeft(doc, " \t\r\n"); len(d) > 0 && d[0] == '[' {
		// Gemini's stream asked for without alt=sse: a JSON array of its
		// chunks.
		var chunks []json.RawMessage
		if json.Unmarshal(d, &chunks) == nil {
			for _, c := range chunks {
				b.readObject(c)
			}
		}
		return
	}
	b.readObject(doc)
}

// readObject is read for one JSON document that is not an array.
func (b *usageBody) readObject(doc []byte) {
	r, ok := usage.Read(doc)
	if !ok {
		return
	}
	u := &b.usage
	u.InputTokens = max(u.InputTokens, r.Input)
	u.CacheReadTokens = max(u.CacheReadTokens, r.CacheRead)
	u.CacheWriteTokens = max(u.CacheWriteTokens, r.CacheWrite)
	u.CacheWrite1hTokens = max(u.CacheWrite1hTokens, r.CacheWrite1h)
	u.OutputTokens = max(u.OutputTokens, r.Output)
	b.found = true
	b.final = b.final || r.Final
}
