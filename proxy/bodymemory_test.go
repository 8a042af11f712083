package proxy

import (
	"bufio"
	"github.com/rebound-go/rebound/internal/frontdoor"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/memnet"
)

// upstreamFunc is an in-memory upstream.
type upstreamFunc func(*http.Request) (*http.Response, error)

func (f upstreamFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func answer(r *http.Request, contentType string, body io.Reader) *http.Response {
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {contentType}}, Body: io.NopCloser(body), ContentLength: -1, Request: r}
}

// TestBodyReservedAsItArrives: a body of declared length is given memory
// as its bytes come (at most twice what came, or firstChunk before
// anything), never its declared length ahead; once read it holds its
// length (the look-ahead may send it again), and once the upstream has
// answered (its first content come, the stream going on) nothing.
func TestBodyReservedAsItArrives(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		events, stream := io.Pipe()
		p, err := New(Options{Upstream: "http://upstream.test", Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Base: upstreamFunc(func(r *http.Request) (*http.Response, error) {
				io.Copy(io.Discard, r.Body)
				return answer(r, "text/event-stream", events), nil
			})})
		if err != nil {
			t.Fatal(err)
		}
		const declared = 1 << 20
		body, client := io.Pipe()
		req := httptest.NewRequest("POST", "http://127.0.0.1/v1/chat/completions", body)
		req.ContentLength = declared
		rec := httptest.NewRecorder()
		go p.ServeHTTP(rec, req)
		synctest.Wait()
		if got := p.memory.inUse(); got > firstChunk {
			t.Fatalf("headers alone: %d bytes reserved, want at most %d", got, firstChunk)
		}
		sent := 0
		for _, n := range []int{20, 40 << 10, 200 << 10, 300 << 10} {
			chunk := strings.Repeat(" ", n)
			if sent == 0 {
				chunk = `{"model":"m","x":"` + chunk[len(`{"model":"m","x":"`):]
			}
			client.Write([]byte(chunk))
			sent += n
			synctest.Wait()
			if got := p.memory.inUse(); got > max(2*int64(sent), firstChunk) {
				t.Errorf("%d bytes sent: %d reserved, want at most twice that", sent, got)
			}
		}
		client.Write([]byte(strings.Repeat("x", declared-sent-2) + `"}`))
		synctest.Wait()
		if got := p.memory.inUse(); got < declared {
			t.Errorf("read whole, the upstream's stream not yet begun: %d bytes reserved, want at least %d", got, declared)
		}
		stream.Write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"))
		synctest.Wait()
		if got := p.memory.inUse(); got != 0 {
			t.Errorf("the upstream has answered, its stream going on: %d bytes still reserved", got)
		}
		stream.Close()
		synctest.Wait()
		if rec.Code != 200 || p.memory.inUse() != 0 {
			t.Errorf("status %d, %d bytes reserved", rec.Code, p.memory.inUse())
		}
	})
}

// TestStalledBodyLosesItsConnection: a client that sends its headers and
// then its body a byte at a time, each 9 s after the last, keeps its
// connection; once it sends nothing more, it gets a 408 and loses the
// connection BodyStall to BodyStall and bodyStallSlack after its last
// byte, never sooner, rather than holding a connection, a goroutine and
// up to MaxBody of memory for ever. The upstream never hears of it.
func TestStalledBodyLosesItsConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reached := false
		p, err := New(Options{Upstream: "http://upstream.test", Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Base: upstreamFunc(func(r *http.Request) (*http.Response, error) {
				reached = true
				return answer(r, "application/json", strings.NewReader(`{}`)), nil
			})})
		if err != nil {
			t.Fatal(err)
		}
		tr, stop := memnet.Serve(p)
		defer stop()
		conn, err := tr.DialContext(t.Context(), "tcp", "127.0.0.1:80")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")
		for range 4 {
			time.Sleep(9 * time.Second)
			if _, err := io.WriteString(conn, " "); err != nil {
				t.Fatalf("a body that sends a byte every 9 s lost its connection: %v", err)
			}
		}
		last := time.Now()
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer to a stalled body: %v", err)
		}
		resp.Body.Close()
		silence := time.Since(last)
		if resp.StatusCode != http.StatusRequestTimeout || silence < BodyStall || silence > BodyStall+BodyStall/10 {
			t.Errorf("after %v of silence: %s; want a 408 after %v to %v", silence, resp.Status, BodyStall, BodyStall+BodyStall/10)
		}
		if _, err := conn.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("the connection was kept after the 408: %v", err)
		}
		if reached {
			t.Error("the upstream heard of a body that never came")
		}
	})
}

// TestBodyMemoryBounded: past MaxBodyMemory a request waits for memory to
// come back, BodyMemoryWait at most, then gets a 503 with Retry-After in
// its dialect; the upstream never sees it. Memory that comes back in time
// lets it through.
func TestBodyMemoryBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		seen := 0
		p, err := New(Options{Upstream: "http://upstream.test", MaxBody: 64 << 10, MaxBodyMemory: 128 << 10,
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Base: upstreamFunc(func(r *http.Request) (*http.Response, error) {
				io.Copy(io.Discard, r.Body)
				seen++
				<-release
				return answer(r, "application/json", strings.NewReader(`{}`)), nil
			})})
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"m","x":"` + strings.Repeat("x", 64<<10-len(`{"model":"m","x":""}`)) + `"}`
		serve := func(path string) *httptest.ResponseRecorder {
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1"+path, strings.NewReader(body)))
			return rec
		}
		held := make(chan *httptest.ResponseRecorder)
		go func() { held <- serve("/v1/chat/completions") }()
		synctest.Wait() // its body is with the upstream; its memory not back yet
		start := time.Now()
		refused := serve("/v1/messages")
		if refused.Code != 503 || refused.Header().Get("Retry-After") == "" || !strings.HasPrefix(refused.Body.String(), `{"type":"error","error":{"type":"overloaded_error"`) {
			t.Errorf("past the bound: %d %v %s, want a 503 with Retry-After in Anthropic's shape", refused.Code, refused.Header(), refused.Body)
		}
		if waited := time.Now().Sub(start); waited != BodyMemoryWait {
			t.Errorf("waited %v, want BodyMemoryWait (%v)", waited, BodyMemoryWait)
		}
		if seen != 1 {
			t.Errorf("the upstream saw %d requests, want 1", seen)
		}
		waiting := make(chan *httptest.ResponseRecorder)
		go func() { waiting <- serve("/v1/chat/completions") }()
		synctest.Wait() // waiting for memory
		release <- struct{}{}
		if rec := <-held; rec.Code != 200 {
			t.Errorf("the first: %d", rec.Code)
		}
		close(release)
		if rec := <-waiting; rec.Code != 200 {
			t.Errorf("memory back while it waited: %d %s, want 200", rec.Code, rec.Body)
		}
		if got := p.memory.inUse(); got != 0 {
			t.Errorf("all done: %d bytes still reserved", got)
		}
	})
}

// TestBodyMemoryOptions: a bound that could never hold one body of the
// largest cap, or a negative one, is refused at New.
func TestBodyMemoryOptions(t *testing.T) {
	for _, o := range []Options{
		{Upstream: "http://u.test", MaxBody: 1 << 20, MaxBodyMemory: 2<<20 - 1},
		{Upstream: "http://u.test", MaxBodyMemory: -1},
		{Config: &FileConfig{Upstreams: map[string]UpstreamConfig{"a": {URL: "http://u.test"}}, Routes: []RouteConfig{{Upstream: "a", MaxBodyBytes: 1 << 30}}}},
	} {
		if _, err := New(o); err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("MaxBody %d, MaxBodyMemory %d: %v, want a one-line error", o.MaxBody, o.MaxBodyMemory, err)
		}
	}
}

// TestReadBodySizes: bodies of every size around the chunk boundaries,
// with a declared length or without (chunked), are read byte for byte,
// hold at most twice their size (or firstChunk) once read, give it all
// back when released, and one byte over the cap is a 413 that holds
// nothing.
func TestReadBodySizes(t *testing.T) {
	const limit = 1<<20 + 3
	mem := newBodyMemory(4 * limit)
	for _, size := range []int{0, 1, firstChunk - 1, firstChunk, firstChunk + 1, 3*firstChunk + 5, 100 << 10, limit - 1, limit, limit + 1} {
		for _, declared := range []bool{true, false} {
			want := strings.Repeat("abcdefg", size/7+1)[:size]
			req := httptest.NewRequest("POST", "http://127.0.0.1/", io.MultiReader(strings.NewReader(want))) // no length of its own
			req.ContentLength = -1
			if declared {
				req.ContentLength = int64(size)
			}
			h, err := readBody(req, frontdoor.NewBodyReader(req.Body, http.NewResponseController(httptest.NewRecorder()), time.Now().Add(time.Minute), req.ContentLength), mem, limit)
			switch {
			case size > limit:
				if err != errTooLarge || mem.inUse() != 0 {
					t.Errorf("size %d, declared %v: %v, %d bytes reserved; want errTooLarge and none", size, declared, err, mem.inUse())
				}
				continue
			case err != nil:
				t.Errorf("size %d, declared %v: %v", size, declared, err)
				continue
			}
			if string(h.b) != want {
				t.Errorf("size %d, declared %v: read %d bytes, not the body", size, declared, len(h.b))
			}
			if got := mem.inUse(); got < int64(size) || got > max(int64(2*size), firstChunk) {
				t.Errorf("size %d, declared %v: %d bytes reserved, want between its size and twice it", size, declared, got)
			}
			h.release()
			if got := mem.inUse(); got != 0 {
				t.Errorf("size %d, declared %v: %d bytes reserved after release", size, declared, got)
			}
		}
	}
}

// TestBodyMemoryUnderLoad: many bodies at once against a bound that
// holds two: each gets through or a 503, none waits past BodyMemoryWait
// in all, and all the memory comes back. Bodies that hold some memory and
// wait for more do not starve one another: memory goes to the oldest, so
// that as the upstream answers, others go on (more than the two that fit
// at first).
func TestBodyMemoryUnderLoad(t *testing.T) {
	const upstreamTime = 250 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		p, err := New(Options{Upstream: "http://upstream.test", MaxBody: 64 << 10, MaxBodyMemory: 128 << 10,
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Base: upstreamFunc(func(r *http.Request) (*http.Response, error) {
				io.Copy(io.Discard, r.Body)
				time.Sleep(upstreamTime)
				return answer(r, "application/json", strings.NewReader(`{}`)), nil
			})})
		if err != nil {
			t.Fatal(err)
		}
		body := `{"model":"m","x":"` + strings.Repeat("x", 60<<10) + `"}`
		codes := make(chan int, 20)
		start := time.Now()
		for range cap(codes) {
			go func() {
				rec := httptest.NewRecorder()
				p.ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1/v1/chat/completions", strings.NewReader(body)))
				codes <- rec.Code
			}()
		}
		ok := 0
		for range cap(codes) {
			switch code := <-codes; code {
			case 200:
				ok++
			case 503:
			default:
				t.Errorf("status %d", code)
			}
		}
		took := time.Since(start)
		t.Logf("%d of %d through in %v", ok, cap(codes), took)
		if ok < 4 || took > BodyMemoryWait+upstreamTime {
			t.Errorf("%d of %d through in %v; want at least 4, within %v", ok, cap(codes), took, BodyMemoryWait+upstreamTime)
		}
		if got := p.memory.inUse(); got != 0 {
			t.Errorf("all done: %d bytes reserved", got)
		}
	})
}

// TestBodyMemoryOldestGoesOn: two bodies hold all the memory and each
// waits for more: rather than both waiting out BodyMemoryWait, the newer
// gives up at once, and once its memory is back the older goes on; a
// newcomer waits behind an older body rather than taking what it needs.
func TestBodyMemoryOldestGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newBodyMemory(100)
		ctx := t.Context()
		deadline := time.Now().Add(BodyMemoryWait)
		older, newer := m.start(), m.start()
		if m.reserve(ctx, older, 0, 50, deadline) != nil || m.reserve(ctx, newer, 0, 50, deadline) != nil {
			t.Fatal("the first reservations were refused")
		}
		olderDone := make(chan error, 1)
		go func() { olderDone <- m.reserve(ctx, older, 50, 40, deadline) }()
		synctest.Wait()
		start := time.Now()
		if err := m.reserve(ctx, newer, 50, 40, deadline); err != errBodyMemory || time.Since(start) != 0 {
			t.Fatalf("the newer body, all memory held by waiters: %v after %v, want errBodyMemory at once", err, time.Since(start))
		}
		m.release(50) // the newer gives up what it held
		if err := <-olderDone; err != nil || time.Since(start) != 0 {
			t.Fatalf("the older body: %v after %v, want its memory at once", err, time.Since(start))
		}
		// 90 in use; an older body waits for 20: a newcomer asking 5,
		// which would fit, waits behind it.
		waiting := make(chan error, 1)
		go func() { waiting <- m.reserve(ctx, older, 90, 20, deadline) }()
		synctest.Wait()
		newcomer := make(chan error, 1)
		go func() { newcomer <- m.reserve(ctx, m.start(), 0, 5, deadline) }()
		synctest.Wait()
		select {
		case err := <-newcomer:
			t.Fatalf("a newcomer took memory (%v) before an older body waiting", err)
		default:
		}
		m.release(30)
		if err := <-waiting; err != nil {
			t.Errorf("the older body: %v", err)
		}
		if err := <-newcomer; err != nil {
			t.Errorf("the newcomer: %v", err)
		}
		if got := m.inUse(); got != 85 {
			t.Errorf("%d in use, want 85", got)
		}
	})
}
