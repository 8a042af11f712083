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
	"time"

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

// next opens, on ctx, the continuation of the answer cut by cut, whose text
// so far (in stream dialect d) is text: the new stream's body, and the
// whitespace its text begins with that the caller has already had. Until
// the new stream's headers come, it is bounded as a stall is.
func (c *continuer) next(ctx context.Context, cancel func(), cut error, d sse.Dialect, text []byte) (io.ReadCloser, string, error) {
	if c == nil || c.made >= c.t.Continuations || ctx.Err() != nil ||
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
	req := c.req.Clone(context.WithValue(ctx, continuingKey{}, true))
	req.Body = io.NopCloser(bytes.NewReader(cont.Body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(cont.Body)), nil }
	req.ContentLength = int64(len(cont.Body))
	req.Header.Set("Content-Length", strconv.Itoa(len(cont.Body)))
	stall := c.t.StreamStall
	if stall == 0 {
		stall = defaultStreamStall
	}
	if stall > 0 {
		waiting := time.AfterFunc(stall, cancel)
		defer waiting.Stop()
	}
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

// resume carries on a stream cut after content with its continuation,
// if it has one: the caller, who has had every complete event of the cut
// stream, reads the continuation's content events next. It reports
// whether it did; ended is how the stream ended. A stream the caller has
// closed, or whose context is done, is not continued.
func (b *streamBody) resume(ended error) bool {
	var ie *IncompleteStreamError
	if b.more == nil || !errors.As(ended, &ie) || !b.tr.TextOnly() || !b.tr.TextKept() || b.tr.TextBytes() == 0 {
		return false
	}
	ctx, cancel := context.WithCancel(b.more.req.Context())
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		cancel()
		return false
	}
	if b.stopCont != nil {
		b.stopCont() // the continuation before this one, cut in its turn
	}
	b.stopCont = cancel // Close ends the continuation, under way or spliced on
	b.mu.Unlock()
	next, trim, err := b.more.next(ctx, cancel, ended, b.tr.Dialect(), b.tr.Text())
	if err != nil {
		return false
	}
	b.mu.Lock()
	if b.closed { // the caller has gone: so does the continuation
		b.mu.Unlock()
		next.Close()
		return false
	}
	old, oldWatch := b.body, b.w
	b.body = next
	b.w = b.more.t.newWatch(next)
	b.mu.Unlock()
	oldWatch.stop()
	old.Close()
	// The provider cut this attempt: its breaker hears so now; the
	// continuation is a call of its own.
	b.held.done(OutcomeFailure)
	// What the caller has not had of the cut stream (half an event, an
	// error event held back) is dropped.
	b.tr.Rewind(b.base)
	b.hi = b.lo
	b.errAt, b.lastEnd = -1, b.base
	id, created := b.tr.ChatID()
	b.src = &splice{r: next, trim: trim, id: id, created: created}
	return true
}

// splice reads a continuation's stream as the rest of the stream it
// continues: its preamble dropped (a second message_start would start a
// second answer), and the whitespace the caller already has taken off
// the front of its text.
type splice struct {
	r       io.Reader
	trim    string          // whitespace still to take off the text
	id      string          // the cut chat stream's id, given to the continuation's chunks
	created json.RawMessage // and its created time
	started bool            // content has come: nothing more is dropped

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
	if k == sse.Content {
		s.started = true
	}
	switch {
	case k == sse.Preamble && !s.started: // a second message_start would start a second answer
	case s.id != "":
		s.out = append(s.out, s.rewrite(ev, s.chatID)...)
	case k == sse.Content && s.trim != "":
		s.out = append(s.out, s.rewrite(ev, s.trimText)...)
	default:
		s.out = append(s.out, ev...)
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

// rewrite returns ev with its data, a JSON object on one data: line,
// changed by change; ev as it is when it has no such data or change
// changes nothing.
func (s *splice) rewrite(ev []byte, change func(map[string]any) bool) []byte {
	i := bytes.Index(ev, []byte("data:"))
	if i < 0 {
		return ev
	}
	j := bytes.IndexAny(ev[i:], "\r\n")
	if j < 0 {
		return ev
	}
	var v map[string]any
	d := json.NewDecoder(bytes.NewReader(bytes.TrimSpace(ev[i+len("data:") : i+j])))
	d.UseNumber()
	if d.Decode(&v) != nil || !change(v) {
		return ev
	}
	var out bytes.Buffer
	out.Write(ev[:i])
	out.WriteString("data: ")
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.Encode(v) // it decoded: it encodes; Encode ends the line
	out.Write(ev[i+j+1:])
	return out.Bytes()
}
