package proxy_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// cannedUpstream answers every request with a small chat completion, in
// memory.
type cannedUpstream struct{}

const canned = `{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`

func (cannedUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, req.Body)
	req.Body.Close()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(canned)), ContentLength: int64(len(canned)), Request: req}, nil
}

// BenchmarkProxy: the proxy's own work for one request (routing, the
// body, rebound.Transport, the breaker, the limits, the access line), the
// network left out: the client's request is served in memory and the
// upstream answers in memory.
func BenchmarkProxy(b *testing.B) {
	benchServe(b, cannedUpstream{}, `{"model":"gpt-x","messages":[{"role":"user","content":"hello"}]}`, canned)
}

// BenchmarkProxyKeyPool: as BenchmarkProxy, to a pool of three keys, for
// a turn of an agent's chat (a system prompt of 4 kB, tools of 2 kB, six
// messages): what keeping its conversation on its key costs (the body
// read a second time, the start of its prompt hashed, each key asked
// whether it can take the request), beside "affinity": "none".
func BenchmarkProxyKeyPool(b *testing.B) {
	system := strings.Repeat("You are a careful coding agent. ", 128)
	tool := `{"type":"function","function":{"name":"read_file","description":"` + strings.Repeat("Reads a file. ", 12) + `","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}`
	body := `{"model":"gpt-x","tools":[` + strings.Repeat(tool+",", 7) + tool + `],"messages":[{"role":"system","content":"` + system + `"},` +
		`{"role":"user","content":"Fix the failing test in main_test.go"},{"role":"assistant","content":"Reading it."},` +
		`{"role":"user","content":"Go on"},{"role":"assistant","content":"Done."},{"role":"user","content":"Now run it"}]}`
	for _, affinity := range []string{"", "none"} {
		b.Run("affinity="+affinity, func(b *testing.B) {
			env := map[string]string{"K1": "sk-1", "K2": "sk-2", "K3": "sk-3"}
			cfg, err := proxy.ParseConfig([]byte(`{"upstreams":{"pool":{"url":"http://upstream.test","keys_env":["K1","K2","K3"],"affinity":"`+affinity+`"}}}`),
				func(k string) string { return env[k] })
			if err != nil {
				b.Fatal(err)
			}
			benchServeWith(b, proxy.Options{Config: cfg, Getenv: func(k string) string { return env[k] }}, cannedUpstream{}, body, canned)
		})
	}
}

// BenchmarkProxyCacheLookup: as BenchmarkProxy, through a route whose
// cache serves "always": every request but the first is a hit, answered
// from the cache (its key hashed, the stored answer copied out) with no
// upstream asked.
func BenchmarkProxyCacheLookup(b *testing.B) {
	benchCache(b, "always")
}

// BenchmarkProxyCacheStore: as BenchmarkProxy, through a route whose
// cache serves "on_failure": every request is a miss that goes to the
// upstream and keeps its answer (the key hashed, the body copied as the
// client reads it, the entry stored).
func BenchmarkProxyCacheStore(b *testing.B) {
	benchCache(b, "on_failure")
}

func benchCache(b *testing.B, serve string) {
	cfg, err := proxy.ParseConfig([]byte(`{"upstreams":{"u":{"url":"http://upstream.test"}},
		"routes":[{"name":"chat","upstream":"u","cache":{"serve":"`+serve+`"}}]}`), func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	benchServeWith(b, proxy.Options{Config: cfg}, cannedUpstream{}, `{"model":"gpt-x","messages":[{"role":"user","content":"hello"}]}`, canned)
}

// benchServe serves body through a proxy in front of upstream, and checks
// that each answer is want.
func benchServe(b *testing.B, upstream http.RoundTripper, body, want string) {
	benchServeWith(b, proxy.Options{Upstream: "http://upstream.test"}, upstream, body, want)
}

// benchServeWith serves body through a proxy made of o in front of upstream, and
// checks that each answer is want.
func benchServeWith(b *testing.B, o proxy.Options, upstream http.RoundTripper, body, want string) {
	o.Base, o.Logger = upstream, slog.New(slog.NewJSONHandler(io.Discard, nil))
	p, err := proxy.New(o)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "http://127.0.0.1:8080/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer sk-client")
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, req)
		if rec.Code != 200 || rec.Body.String() != want {
			b.Fatalf("status %d: %q", rec.Code, rec.Body)
		}
	}
}

// cannedStream answers every request with the five chunks of a short
// streamed chat completion and its end, in memory.
type cannedStream struct{}

const cannedSSE = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n" +
	`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hello!"},"finish_reason":null}]}` + "\n\n" +
	`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" How can I"},"finish_reason":null}]}` + "\n\n" +
	`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" help you today?"},"finish_reason":null}]}` + "\n\n" +
	`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":9,"total_tokens":18}}` + "\n\n" +
	"data: [DONE]\n\n"

func (cannedStream) RoundTrip(req *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, req.Body)
	req.Body.Close()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(cannedSSE)), ContentLength: -1, Request: req}, nil
}

// BenchmarkProxyStream: as BenchmarkProxy, for a streamed answer: the
// look-ahead, the stream's tracking and its usage besides.
func BenchmarkProxyStream(b *testing.B) {
	benchServe(b, cannedStream{}, `{"model":"gpt-x","messages":[{"role":"user","content":"hello"}],"stream":true}`, cannedSSE)
}

// BenchmarkProxyLoopback: one request at a time over real loopback
// connections, client to proxy to upstream, beside a bare
// httputil.ReverseProxy: what the proxy adds to a request's latency, not
// only its CPU.
func BenchmarkProxyLoopback(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, canned)
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	hop := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }})
	defer hop.Close()
	p, err := proxy.New(proxy.Options{Upstream: up.URL, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	reb := httptest.NewServer(p)
	defer reb.Close()
	const body = `{"model":"gpt-x","messages":[{"role":"user","content":"hello"}]}`
	for _, c := range []struct{ name, url string }{{"direct", up.URL}, {"hop", hop.URL}, {"rebound", reb.URL}} {
		b.Run(c.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			defer client.CloseIdleConnections()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Post(c.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
}
