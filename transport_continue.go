package rebound

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/rebound-go/rebound/internal/continuation"
	"github.com/rebound-go/rebound/internal/sse"
)

// continuingKey marks the context of a continuation's request: its own
// stream is not continued from inside it, but by the stream it is spliced
// onto, which knows the whole text delivered.
type continuingKey struct{}

// continuer continues a text answer whose stream was cut after content:
// it keeps what a continuation needs of the request that was cut.
type continuer struct {
	t       *Transport
	req     *http.Request
	body    func() (io.ReadCloser, error)
	dialect continuation.Dialect
	target  string
	made    int // continuations made so far
}

// continuer returns the continuer of req's stream, or nil when the
// Transport makes none or req cannot be continued: an unreplayable body,
// an API that has no continuation, a continuation's own request.
func (t *Transport) continuer(req *http.Request, body requestBody, target string) *continuer {
	d := continuation.DialectOf(req.URL.Path)
	if t.Continuations <= 0 || body.get == nil || body.once || d == continuation.Unknown || req.Context().Value(continuingKey{}) != nil {
		return nil
	}
	return &continuer{t: t, req: req, body: body.get, dialect: d, target: target}
}

// errNoContinuation says a cut stream is not continued.
var errNoContinuation = errors.New("rebound: no continuation")

// next opens the continuation of the answer cut by cut, whose text so far
// (in stream dialect d) is text: the new stream's body, and the whitespace
// its text begins with that the caller has already had.
func (c *continuer) next(cut error, d sse.Dialect, text []byte) (io.ReadCloser, string, error) {
	if c == nil || c.made >= c.t.Continuations ||
		!(d == sse.Chat && c.dialect == continuation.OpenAIChat || d == sse.Anthropic && c.dialect == continuation.AnthropicMessages) {
		return nil, "", errNoContinuation
	}
	rc, err := c.body()
	if err != nil {
		return nil, "", err
	}
	raw, err := io.ReadAll(io.LimitReader(rc, defaultMaxBufferedBody+1))
	rc.Close()
	if err != nil || len(raw) > defaultMaxBufferedBody {
		return nil, "", errNoContinuation
	}
	cont, err := continuation.Continue(c.dialect, raw, string(text))
	if err != nil {
		return nil, "", err
	}
	c.made++
	if obs := c.t.Policy.Observer; obs != nil {
		obs.Observe(Event{Type: EventContinue, Target: c.target, Attempt: c.made, Err: cut})
	}
	req := c.req.Clone(context.WithValue(c.req.Context(), continuingKey{}, true))
	req.Body = io.NopCloser(bytes.NewReader(cont.Body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(cont.Body)), nil }
	req.ContentLength = int64(len(cont.Body))
	req.Header.Set("Content-Length", strconv.Itoa(len(cont.Body)))
	resp, err := c.t.RoundTrip(req)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK || !isEventStream(resp) {
		resp.Body.Close()
		return nil, "", fmt.Errorf("rebound: the continuation was answered %s, not a stream", resp.Status)
	}
	return resp.Body, cont.Trimmed, nil
}

// holdErrors makes b hold back an error event after content, so that a
// continuation can take over from before it: the caller must not see an
// error in the middle of an answer that goes on.
func (b *streamBody) holdErrors() {
	b.lastEnd = b.tr.Complete()
	b.tr.Each = func(end int64, k sse.Kind) {
		if k == sse.Error && b.errAt < 0 {
			b.errAt = b.lastEnd
		}
		b.lastEnd = end
	}
}

// resume carries on a stream cut after content with its continuation,
// if it has one: the caller, who has had every complete event of the cut
// stream, reads the continuation's content events next. It reports
// whether it did; ended is how the stream ended.
func (b *streamBody) resume(ended error) bool {
	var ie *IncompleteStreamError
	if b.more == nil || !errors.As(ended, &ie) || !b.tr.TextOnly() || !b.tr.TextKept() || b.tr.TextBytes() == 0 {
		return false
	}
	next, trim, err := b.more.next(ended, b.tr.Dialect(), b.tr.Text())
	if err != nil {
		return false
	}
	// What the caller has not had of the cut stream (half an event, an
	// error event held back) is dropped.
	b.mu.Lock()
	if b.closed { // the caller has gone: so does the continuation
		b.mu.Unlock()
		next.Close()
		return false
	}
	old := b.body
	b.body = next
	b.mu.Unlock()
	old.Close()
	b.tr.Rewind(b.base)
	b.hi = b.lo
	b.errAt, b.lastEnd = -1, b.base
	b.src = &splice{r: next, trim: trim}
	b.w.stop()
	b.w = b.more.t.newWatch(next)
	return true
}

// splice reads a continuation's stream as the rest of the stream it
// continues: its preamble dropped (a second message_start would start a
// second answer), and the whitespace the caller already has taken off
// the front of its text.
type splice struct {
	r    io.Reader
	trim string // whitespace still to take off the text

	tr    sse.Tracker
	buf   []byte // bytes read and not yet judged, from offset off
	off   int64
	out   []byte // events to hand on
	ready bool   // tr.Each is set
	err   error
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
	case k == sse.Preamble:
	case k == sse.Content && s.trim != "":
		s.out = append(s.out, s.trimText(ev)...)
	default:
		s.out = append(s.out, ev...)
	}
}

// trimText returns the content event ev with the whitespace still to trim
// taken off the front of its text, if its text begins with it: an
// Anthropic content_block_delta.
func (s *splice) trimText(ev []byte) []byte {
	i := bytes.Index(ev, []byte("data:"))
	if i < 0 {
		return ev
	}
	j := bytes.IndexAny(ev[i:], "\r\n")
	if j < 0 {
		return ev
	}
	data := bytes.TrimSpace(ev[i+len("data:") : i+j])
	var delta map[string]any
	if json.Unmarshal(data, &delta) != nil {
		return ev
	}
	inner, _ := delta["delta"].(map[string]any)
	text, ok := inner["text"].(string)
	if !ok {
		return ev
	}
	switch {
	case strings.HasPrefix(text, s.trim):
		text, s.trim = text[len(s.trim):], ""
	case strings.HasPrefix(s.trim, text):
		text, s.trim = "", s.trim[len(text):]
	default:
		s.trim = "" // the model did not write it again
		return ev
	}
	inner["text"] = text
	var out bytes.Buffer
	out.Write(ev[:i])
	out.WriteString("data: ")
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.Encode(delta) // it decoded: it encodes; Encode ends the line
	out.Write(ev[i+j+1:])
	return out.Bytes()
}
