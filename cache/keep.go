package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/provider"
	"github.com/rebound-go/rebound/internal/sse"
)

// unkept are the response headers a stored answer does not carry: they
// belong to the connection or to the moment (a rate limit's headroom, a
// wait, a cookie), not to the answer.
var unkept = []string{
	"Connection", "Keep-Alive", "Transfer-Encoding", "Content-Length", "Date", "Set-Cookie",
	"Retry-After", "Retry-After-Ms", "Age", Header,
}

// unkeptPrefixes are the header prefixes of a rate limit's headroom.
var unkeptPrefixes = []string{"X-Ratelimit-", "Anthropic-Ratelimit-", "X-Should-Retry"}

// keeper is the body of a success that may be kept: it copies what the
// caller reads, and keeps it once the caller has read it whole. Close
// before the end keeps nothing.
type keeper struct {
	c      *Cache
	k      *call
	key    string
	ctx    context.Context
	resp   *http.Response
	body   io.ReadCloser
	stream bool
	limit  int64

	mu      sync.Mutex // Close may come from another goroutine
	buf     []byte
	tracker sse.Tracker
	over    bool // past limit: nothing will be kept
	done    bool
}

func (b *keeper) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return n, err
	}
	if n > 0 && !b.over {
		if int64(len(b.buf)+n) > b.limit {
			b.over, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
			if b.stream {
				b.tracker.Write(p[:n])
			}
		}
	}
	switch {
	case err == io.EOF:
		b.done = true
		b.keep()
	case err != nil:
		b.done = true
	}
	return n, err
}

func (b *keeper) Close() error {
	b.mu.Lock()
	b.done = true
	b.mu.Unlock()
	return b.body.Close()
}

// keep stores the answer read whole, if it is: within the limit, as long
// as its Content-Length says, and a stream that ended with the provider's
// own end.
func (b *keeper) keep() {
	switch {
	case b.over:
		return
	case b.resp.ContentLength >= 0 && int64(len(b.buf)) != b.resp.ContentLength:
		return
	case b.resp.StatusCode != http.StatusOK:
		return // a 202's job not done, a 206's part, a 204's nothing
	case encoded(b.resp.Header):
		// The caller asked for the encoding itself; the next caller,
		// keyed alike, may not have.
		return
	case b.stream && !b.tracker.Ended():
		return
	case !b.stream && !answered(b.resp.Header, b.buf):
		return
	}
	h := b.resp.Header.Clone()
	for _, name := range unkept {
		h.Del(name)
	}
	for name := range h {
		for _, p := range unkeptPrefixes {
			if len(name) >= len(p) && name[:len(p)] == p {
				delete(h, name)
			}
		}
	}
	e := Entry{Status: b.resp.StatusCode, Header: h, Body: b.buf, Stored: time.Now()}
	b.buf = nil
	// The caller's context may end as soon as it has read the body; the
	// store's own bounds hold the Put.
	if err := b.c.store.Put(context.WithoutCancel(b.ctx), b.key, e, b.c.cfg.MaxStaleOrDefault()); err != nil {
		return
	}
	b.c.stored.Add(1)
	b.k.note(Stored)
}

// answered reports whether body, a 200's whole body, is an answer to
// keep: a JSON one must be a whole document, not an error (some providers
// and proxies send theirs with a 200) and not a response that failed or
// has not finished (the Responses API's "status"), none of which the
// status says. A body that is not JSON is taken as it is.
func answered(h http.Header, body []byte) bool {
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	trimmed := bytes.TrimSpace(body)
	if !strings.Contains(mt, "json") && (mt != "" || len(trimmed) == 0 || (trimmed[0] != '{' && trimmed[0] != '[')) {
		return true
	}
	if !json.Valid(trimmed) {
		return false
	}
	if _, isErr := provider.Parse(trimmed); isErr {
		return false
	}
	if trimmed[0] != '{' {
		return true
	}
	var top struct {
		Status json.RawMessage `json:"status"`
	}
	if json.Unmarshal(trimmed, &top) != nil {
		return false
	}
	switch string(bytes.TrimSpace(top.Status)) {
	case `"failed"`, `"incomplete"`, `"in_progress"`, `"queued"`, `"cancelled"`:
		return false
	}
	return true
}

// encoded reports whether h says its body is still in a content coding.
func encoded(h http.Header) bool {
	for _, v := range h.Values("Content-Encoding") {
		if v = strings.TrimSpace(v); v != "" && !strings.EqualFold(v, "identity") {
			return true
		}
	}
	return false
}
