package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/proxy"
)

// heldUpstream is an upstream in memory: it answers a streamed request
// with its first content and holds the stream open until end is closed;
// a plain one with canned, at once or, with hang, once end is closed.
type heldUpstream struct {
	end  chan struct{}
	hang bool
	hits atomic.Int64
}

const (
	heldHead = `data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}` + "\n\n"
	heldTail = `data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"
)

func (u *heldUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.hits.Add(1)
	b, _ := io.ReadAll(req.Body)
	req.Body.Close()
	if bytes.Contains(b, []byte(`"stream":true`)) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
			Body: &heldStream{ctx: req.Context(), end: u.end, r: strings.NewReader(heldHead)}, ContentLength: -1, Request: req}, nil
	}
	if u.hang {
		select {
		case <-u.end:
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(canned)), ContentLength: int64(len(canned)), Request: req}, nil
}

// heldStream sends heldHead, then heldTail once end is closed.
type heldStream struct {
	ctx  context.Context
	end  <-chan struct{}
	r    *strings.Reader
	tail bool
}

func (s *heldStream) Read(p []byte) (int, error) {
	if s.r.Len() == 0 && !s.tail {
		select {
		case <-s.end:
		case <-s.ctx.Done():
			return 0, s.ctx.Err()
		}
		s.r, s.tail = strings.NewReader(heldTail), true
	}
	return s.r.Read(p)
}

func (s *heldStream) Close() error { return nil }

// streamWriter is a client's end of a streamed answer: it notes whether
// the stream's first content reached it.
type streamWriter struct {
	header http.Header
	mu     sync.Mutex
	got    bytes.Buffer
}

func (w *streamWriter) Header() http.Header { return w.header }
func (w *streamWriter) WriteHeader(int)     {}
func (w *streamWriter) Flush()              {}

func (w *streamWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.got.Write(b)
}

func (w *streamWriter) content() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Contains(w.got.String(), "Hel")
}

// TestOpenStreamsLeaveRoomForOtherCalls: streams that have sent their
// first content and stay open do not hold the upstream's limit on
// requests in flight (20 at first): with 20 and then 30 of them open, a
// plain call and further streams go through at once.
func TestOpenStreamsLeaveRoomForOtherCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &heldUpstream{end: make(chan struct{})}
		p, err := proxy.New(proxy.Options{Upstream: "http://upstream.test", Base: up, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		defer wg.Wait()
		defer close(up.end)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // a client that gives up, should the proxy make it wait
		defer cancel()
		stream := func(i int) {
			t.Helper()
			w := &streamWriter{header: http.Header{}}
			req := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
			wg.Go(func() { p.ServeHTTP(w, req) })
			synctest.Wait()
			if !w.content() {
				t.Fatalf("stream %d: no content reached the client with %d streams open", i+1, i)
			}
		}
		for i := range 20 {
			stream(i)
		}
		start := time.Now()
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/v1/chat/completions", strings.NewReader(`{"model":"m"}`)))
		if rec.Code != 200 || rec.Body.String() != canned || time.Since(start) != 0 {
			t.Fatalf("a plain call with 20 streams open: status %d, %q after %v", rec.Code, rec.Body, time.Since(start))
		}
		for i := 20; i < 30; i++ {
			stream(i)
		}
	})
}

// TestNoSlotInTimeGets503: a request that finds the upstream's limit on
// requests in flight taken, and no slot free within MaxQueueWait (30 s
// unless set), gets a 503 with Retry-After in its dialect, before its
// client gives up, and the upstream never sees it; the access line says
// why.
func TestNoSlotInTimeGets503(t *testing.T) {
	for _, tc := range []struct{ maxQueueWait, want time.Duration }{
		{0, proxy.DefaultMaxQueueWait},
		{5 * time.Second, 5 * time.Second},
	} {
		synctest.Test(t, func(t *testing.T) {
			up := &heldUpstream{end: make(chan struct{}), hang: true}
			var logs syncBuffer
			p, err := proxy.New(proxy.Options{Upstream: "http://upstream.test", Base: up, MaxQueueWait: tc.maxQueueWait,
				Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute) // the client's own patience
			defer cancel()
			var wg sync.WaitGroup
			held := make([]*httptest.ResponseRecorder, 20) // the limit at first
			for i := range held {
				held[i] = httptest.NewRecorder()
				req := httptest.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/v1/messages", strings.NewReader(`{"model":"m"}`))
				wg.Go(func() { p.ServeHTTP(held[i], req) })
			}
			synctest.Wait()
			rec := httptest.NewRecorder()
			start := time.Now()
			p.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1/v1/messages", strings.NewReader(`{"model":"m"}`)))
			waited := time.Since(start)
			hits := up.hits.Load()
			close(up.end)
			wg.Wait()
			var e struct {
				Type  string
				Error struct{ Type string }
			}
			json.Unmarshal(rec.Body.Bytes(), &e)
			if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || e.Type != "error" || e.Error.Type != "overloaded_error" {
				t.Errorf("no slot: status %d, Retry-After %q, %s; want a 503 with Retry-After in Anthropic's shape", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
			}
			if waited != tc.want {
				t.Errorf("answered after %v of waiting, want %v", waited, tc.want)
			}
			if hits != int64(len(held)) {
				t.Errorf("the upstream saw %d requests, want the %d that held the slots", hits, len(held))
			}
			for i, h := range held {
				if h.Code != 200 {
					t.Errorf("held request %d: status %d", i, h.Code)
				}
			}
			var noSlot []float64 // the statuses of the access lines that say no_slot
			for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
				var rec map[string]any
				if json.Unmarshal([]byte(line), &rec) == nil && rec["outcome"] == "no_slot" {
					status, _ := rec["status"].(float64)
					noSlot = append(noSlot, status)
				}
			}
			if len(noSlot) != 1 || noSlot[0] != 503 {
				t.Errorf("statuses of the access lines with outcome no_slot: %v, want one 503:\n%s", noSlot, logs.String())
			}
		})
	}
}

// syncBuffer is a bytes.Buffer for several goroutines' logs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// stuckWriter is a client that does not read its answer: a write blocks
// until free is closed, then fails.
type stuckWriter struct {
	header http.Header
	free   <-chan struct{}
}

func (w *stuckWriter) Header() http.Header { return w.header }
func (w *stuckWriter) WriteHeader(int)     {}

func (w *stuckWriter) Write([]byte) (int, error) {
	<-w.free
	return 0, io.ErrClosedPipe
}

// TestClientsThatDoNotReadHoldNoSlot: an answer that is not a stream
// gives its slot of the upstream's limit on requests in flight back once
// the upstream has answered, not when the client has read it all: clients
// that leave their answers unread (20, the limit at first) do not keep
// every other call waiting.
func TestClientsThatDoNotReadHoldNoSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &heldUpstream{end: make(chan struct{})}
		p, err := proxy.New(proxy.Options{Upstream: "http://upstream.test", Base: up, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		free := make(chan struct{})
		var wg sync.WaitGroup
		defer wg.Wait()
		defer close(free)
		for range 20 {
			w := &stuckWriter{header: http.Header{}, free: free}
			req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1/v1/chat/completions", strings.NewReader(`{"model":"m"}`))
			wg.Go(func() { p.ServeHTTP(w, req) })
		}
		synctest.Wait()
		start := time.Now()
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1/v1/chat/completions", strings.NewReader(`{"model":"m"}`)))
		if rec.Code != 200 || rec.Body.String() != canned || time.Since(start) != 0 {
			t.Fatalf("a call beside 20 clients that do not read: status %d, %q after %v", rec.Code, rec.Body, time.Since(start))
		}
	})
}

// hostUpstreams sends each request to the upstream of its host.
type hostUpstreams map[string]http.RoundTripper

func (h hostUpstreams) RoundTrip(req *http.Request) (*http.Response, error) {
	return h[req.URL.Host].RoundTrip(req)
}

// TestNoSlotMovesToTheNextUpstream: a request that found no slot of its
// upstream's limit on requests in flight within MaxQueueWait was never
// sent: it goes to the route's next upstream, if that one has a slot free
// at once. It does not wait there again: with every upstream full, the
// 503 comes after MaxQueueWait, not after one wait per upstream.
func TestNoSlotMovesToTheNextUpstream(t *testing.T) {
	for _, secondFull := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			primary := &heldUpstream{end: make(chan struct{}), hang: true}
			second := &heldUpstream{end: make(chan struct{}), hang: true}
			c, err := proxy.ParseConfig([]byte(`{"upstreams":{"p":{"url":"http://primary.test"},"s":{"url":"http://second.test"}},
				"routes":[{"model":"direct","upstream":"s"},{"upstream":"p","fallbacks":[{"upstream":"s"}]}]}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			p, err := proxy.New(proxy.Options{Config: c, Base: hostUpstreams{"primary.test": primary, "second.test": second},
				MaxQueueWait: 5 * time.Second, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			hold := func(model string) { // a request that holds a slot until its upstream answers
				req := httptest.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1/v1/chat/completions", strings.NewReader(`{"model":"`+model+`"}`))
				wg.Go(func() { p.ServeHTTP(httptest.NewRecorder(), req) })
			}
			for range 20 { // the limit at first
				hold("m")
				if secondFull {
					hold("direct")
				}
			}
			synctest.Wait()
			if !secondFull {
				close(second.end) // the second answers at once
			}
			rec := httptest.NewRecorder()
			start := time.Now()
			p.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodPost, "http://127.0.0.1/v1/chat/completions", strings.NewReader(`{"model":"m"}`)))
			waited := time.Since(start)
			close(primary.end)
			if secondFull {
				close(second.end)
			}
			wg.Wait()
			want, hits := http.StatusOK, int64(1)
			if secondFull {
				want, hits = http.StatusServiceUnavailable, 20
			}
			// Asking the second for a slot free at once is a wait of a
			// nanosecond, the least bound ratelimit.Transport takes.
			if rec.Code != want || waited.Round(time.Millisecond) != 5*time.Second || second.hits.Load() != hits {
				t.Errorf("second full %v: status %d after %v, the second upstream got %d requests; want %d after 5s, %d requests\n%s",
					secondFull, rec.Code, waited, second.hits.Load(), want, hits, logs.String())
			}
		})
	}
}
