package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/proxy"
)

// TestProxyKeepsEscapedPath: every request goes to the upstream with the
// path it came with: an escaped slash stays escaped.
func TestProxyKeepsEscapedPath(t *testing.T) {
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL})
	do(t, "GET", front.URL+"/v1/files/file-a%2Fb/content", "")
	if s.rawPath != "/v1/files/file-a%2Fb/content" {
		t.Errorf("upstream got path %q, want /v1/files/file-a%%2Fb/content", s.rawPath)
	}
}

// TestProxyAsksForAnEncodingItReads: a client such as httpx with brotli or
// zstandard installed sends Accept-Encoding: br, zstd; passed on, the
// upstream would compress its error in a way the classifier cannot read,
// and an exhausted quota would pass for a plain rate limit, retried 4
// times. The proxy asks for what it reads: the quota is heard at once.
func TestProxyAsksForAnEncodingItReads(t *testing.T) {
	const quota = `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if strings.Contains(r.Header.Get("Accept-Encoding"), "br") {
			w.Header().Set("Content-Encoding", "br")
			w.WriteHeader(429)
			w.Write(brotliStored([]byte(quota)))
			return
		}
		w.WriteHeader(429)
		io.WriteString(w, quota)
	})
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL})
	resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Accept-Encoding", "gzip, deflate, br, zstd")
	if s.hits != 1 {
		t.Errorf("quota, compressed as the client allowed: %d upstream requests (status %d), want 1", s.hits, resp.StatusCode)
	}
}

// brotliStored encodes b as a brotli stream of one uncompressed
// meta-block (RFC 7932 §9.2), len(b) ≤ 65536.
func brotliStored(b []byte) []byte {
	var out []byte
	var acc uint64
	var n uint
	put := func(v uint64, bits uint) {
		acc |= v << n
		n += bits
		for n >= 8 {
			out = append(out, byte(acc))
			acc >>= 8
			n -= 8
		}
	}
	flush := func() {
		if n > 0 {
			out = append(out, byte(acc))
			acc, n = 0, 0
		}
	}
	put(0, 1)                 // WBITS = 16
	put(0, 1)                 // ISLAST = 0
	put(0, 2)                 // MNIBBLES = 4
	put(uint64(len(b)-1), 16) // MLEN - 1
	put(1, 1)                 // ISUNCOMPRESSED
	flush()
	out = append(out, b...)
	put(1, 1) // ISLAST
	put(1, 1) // ISLASTEMPTY
	flush()
	return out
}

// TestProxyClientKeyStaysWithItsUpstream: with pass_client_key, the key a
// client sent for the route's upstream does not go on to a fallback on
// another host (another company's endpoint of the same dialect).
func TestProxyClientKeyStaysWithItsUpstream(t *testing.T) {
	primary, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(503) })
	other, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	c := config(t, `{"pass_client_key":true,"upstreams":{"p":{"url":"`+primary.URL+`"},"o":{"url":"`+other.URL+`"}},
		"routes":[{"upstream":"p","fallbacks":[{"upstream":"o","model":"other-model"}]}],"policy":{"max_attempts":1}}`, nil)
	front, _ := serveProxy(t, proxy.Options{Config: c})
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer sk-client-primary-key-0123")
	if got := s.header.Get("Authorization"); got != "" {
		t.Errorf("the fallback on another host got the client's key for the primary: %q", got)
	}
}

// TestProxyClientGoneCancelsUpstream: a client that leaves mid-stream
// cancels the upstream request.
func TestProxyClientGoneCancelsUpstream(t *testing.T) {
	cancelled := make(chan struct{})
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(cancelled)
	})
	front, _ := serveProxy(t, proxy.Options{Upstream: up.URL})
	req, _ := http.NewRequest("POST", front.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	bufio.NewReader(resp.Body).ReadString('\n')
	resp.Body.Close()
	<-cancelled // hangs (test timeout) if the upstream is never cancelled
}

// TestProxyParallelStreamsAndFallbacks: streams, plain answers and
// fallbacks in parallel, under the race detector.
func TestProxyParallelStreamsAndFallbacks(t *testing.T) {
	primary, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n%3 == 0 {
			w.WriteHeader(503)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: [DONE]\n\n")
	})
	second, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	c := config(t, `{"upstreams":{"p":{"url":"`+primary.URL+`"},"s":{"url":"`+second.URL+`"}},
		"routes":[{"upstream":"p","fallbacks":[{"upstream":"s","model":"y"}]}],"policy":{"max_attempts":2,"base_delay_ms":1,"max_delay_ms":2}}`, nil)
	front, _ := serveProxy(t, proxy.Options{Config: c})
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(fmt.Sprintf(`{"model":"m%d","stream":true}`, i%5)))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Errorf("status %d", resp.StatusCode)
			}
		})
	}
	wg.Wait()
}

// TestProxyFallsBackFromAStreamThatFailsFirst: a stream whose first event
// is an error (Anthropic's overloaded_error, in a 200) failed before any
// content reached the client: out of retries, the route's fallback gets
// the request, as after an error status. The last upstream's such stream
// goes back to the client as it came.
func TestProxyFallsBackFromAStreamThatFailsFirst(t *testing.T) {
	const overloaded = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"
	primary, ps := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, overloaded)
	})
	second, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n"+
			"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n"+
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	})
	c := config(t, `{"upstreams":{"p":{"url":"`+primary.URL+`","dialect":"anthropic"},"s":{"url":"`+second.URL+`","dialect":"anthropic"}},
		"routes":[{"model":"alone","upstream":"p"},{"upstream":"p","fallbacks":[{"upstream":"s"}]}],"policy":{"max_attempts":1}}`, nil)
	front, logs := serveProxy(t, proxy.Options{Config: c})
	if resp, body := do(t, "POST", front.URL+"/v1/messages", `{"model":"m","stream":true}`); resp.StatusCode != 200 || !strings.Contains(body, `"Hi"`) {
		t.Errorf("with a fallback: %d %q; want the second upstream's stream\n%s", resp.StatusCode, body, logs)
	}
	if resp, body := do(t, "POST", front.URL+"/v1/messages", `{"model":"alone","stream":true}`); resp.StatusCode != 200 || body != overloaded {
		t.Errorf("alone: %d %q; want the upstream's stream as it came", resp.StatusCode, body)
	}
	if ps.hits != 2 {
		t.Errorf("the primary got %d requests, want 2", ps.hits)
	}
}

// TestProxyPassesOverAnOpenBreaker: an upstream whose breaker is open is
// not sent the request: the route's fallback answers at once.
func TestProxyPassesOverAnOpenBreaker(t *testing.T) {
	primary, ps := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusServiceUnavailable) })
	second, ss := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{"from":"second"}`) })
	c := config(t, `{"upstreams":{"p":{"url":"`+primary.URL+`"},"s":{"url":"`+second.URL+`"}},
		"routes":[{"model":"m","upstream":"p","fallbacks":[{"upstream":"s"}]}],"policy":{"max_attempts":1}}`, nil)
	front, logs := serveProxy(t, proxy.Options{Config: c, Breaker: func(key string) rebound.Breaker {
		return breaker.New(key, breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Hour})
	}})
	for i := range 3 {
		if resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`); resp.StatusCode != 200 || body != `{"from":"second"}` {
			t.Fatalf("request %d: %d %q; want the second's answer", i+1, resp.StatusCode, body)
		}
	}
	if ps.hits != 1 || ss.hits != 3 {
		t.Errorf("the primary got %d requests, the second %d; want 1 (then its breaker open) and 3\n%s", ps.hits, ss.hits, logs)
	}
}
