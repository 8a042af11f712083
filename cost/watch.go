package cost

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"sync"

	"github.com/rebound-go/rebound/internal/sse"
)

// WatchUsage replaces resp.Body with one that reads the token usage the
// response reports as the caller reads it (a JSON body, or an event
// stream's usage events, in the dialects rebound.Transport speaks: OpenAI's
// Chat Completions and Responses, Anthropic's Messages, Gemini), and calls
// done once, when the body ends or is closed, with the largest counts seen
// (cache tokens are input) and whether they are final: a whole body's, or
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
// array of Gemini's chunks) reports, in any of the dialects. Counts are cumulative in every dialect
// (Anthropic's message_delta, Gemini's chunks), so the largest seen is
// the attempt's; cache tokens are input. A document with a count that is
// negative, or too large to add up, says nothing.
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
	d, how := sse.ReadUsage(doc)
	if how == sse.UsageInvalid {
		return
	}
	var in, out [9]int64 // room for every count the dialects give
	nIn, nOut := 0, 0
	for _, c := range [...]struct {
		set    bool
		counts *sse.UsageCounts
	}{{d.HasTop, &d.Top}, {d.HasMessage, &d.Message}, {d.HasResponse, &d.Response}} {
		if c.set {
			nIn += copy(in[nIn:], []int64{c.counts.PromptTokens, c.counts.InputTokens, c.counts.CacheCreationInputTokens, c.counts.CacheReadInputTokens})
			nOut += copy(out[nOut:], []int64{c.counts.CompletionTokens, c.counts.OutputTokens})
		}
	}
	if d.HasMetadata {
		m := d.Metadata
		nIn += copy(in[nIn:], []int64{m.PromptTokenCount})
		nOut += copy(out[nOut:], []int64{m.CandidatesTokenCount, m.ThoughtsTokenCount})
	}
	if nIn == 0 {
		return
	}
	sumIn, okIn := sum(in[:nIn])
	sumOut, okOut := sum(out[:nOut])
	if !okIn || !okOut {
		return
	}
	b.usage.InputTokens = max(b.usage.InputTokens, sumIn)
	b.usage.OutputTokens = max(b.usage.OutputTokens, sumOut)
	b.found = true
	b.final = b.final || d.HasTop || d.HasResponse || d.HasMetadata && d.Finished
}

// sum adds counts, false if one is negative or the sum would not fit.
func sum(counts []int64) (int64, bool) {
	var total int64
	for _, n := range counts {
		if n < 0 || total > math.MaxInt64/2-n {
			return 0, false
		}
		total += n
	}
	return total, true
}
