package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound/proxy"
)

// TestStreamsFlushedAsTheyCome: each part of a stream reaches the client
// while the upstream is still holding the rest back, for an event stream
// and for Gemini's JSON array stream (no event-stream type, no length);
// a whole answer of known length keeps its length.
func TestStreamsFlushedAsTheyCome(t *testing.T) {
	const (
		sseHead = `data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}` + "\n\n"
		sseTail = `data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"
		gemHead = `[{"candidates":[{"content":{"parts":[{"text":"Hel"}]}}]}`
		gemTail = `,{"candidates":[{"content":{"parts":[{"text":"lo"}]},"finishReason":"STOP"}]}]`
		whole   = `{"choices":[{"index":0,"message":{"role":"assistant","content":"Hello"},"finish_reason":"stop"}]}`
	)
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		head, tail := sseHead, sseTail
		switch {
		case strings.HasSuffix(r.URL.Path, ":streamGenerateContent"):
			w.Header().Set("Content-Type", "application/json")
			head, tail = gemHead, gemTail
		case strings.HasSuffix(r.URL.Path, "/completions"):
			w.Header().Set("Content-Type", "text/event-stream")
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", strconv.Itoa(len(whole)))
			io.WriteString(w, whole)
			return
		}
		io.WriteString(w, head)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, tail)
	}))
	defer up.Close()
	p, err := proxy.New(proxy.Options{Upstream: up.URL, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()

	for _, c := range []struct{ path, body, head, tail string }{
		{"/v1/chat/completions", `{"model":"gpt-x","stream":true}`, sseHead, sseTail},
		{"/v1beta/models/gemini-x:streamGenerateContent", `{"contents":[]}`, gemHead, gemTail},
	} {
		// Bounded: a proxy that held the head back would leave the
		// read below waiting for the upstream, which waits for it.
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", c.path, err)
		}
		head := make([]byte, len(c.head))
		if _, err := io.ReadFull(resp.Body, head); err != nil || string(head) != c.head {
			t.Errorf("%s: before the upstream went on, read %q, %v; want %q", c.path, head, err, c.head)
		}
		release <- struct{}{}
		tail, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if err != nil || string(tail) != c.tail {
			t.Errorf("%s: then read %q, %v; want %q", c.path, tail, err, c.tail)
		}
	}

	resp, err := http.Post(front.URL+"/v1/messages", "application/json", strings.NewReader(`{"model":"claude-x"}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != whole || resp.ContentLength != int64(len(whole)) {
		t.Errorf("whole answer: %q (length %d), %v; want %q of length %d", got, resp.ContentLength, err, whole, len(whole))
	}
}

// TestDeclaredLengthNotAllocatedAhead: a client that declares a large
// body and sends one byte of it costs the proxy what it sent, not what it
// declared: four such requests, each answered 408 when the body timeout
// passes, allocate far less than one declared body.
func TestDeclaredLengthNotAllocatedAhead(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("the upstream was called") }))
	defer up.Close()
	p, err := proxy.New(proxy.Options{Upstream: up.URL, BodyTimeout: 200 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	const declared = proxy.DefaultMaxBody - 1
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			c, err := net.Dial("tcp", front.Listener.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n{", declared)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("status %d, want 408", resp.StatusCode)
			}
		})
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > declared/4 {
		t.Errorf("4 requests of 1 byte each allocated %d MiB; one declared body is %d MiB", got>>20, declared>>20)
	}
}
