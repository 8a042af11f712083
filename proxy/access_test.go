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
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/proxy"
)

// TestAccessLogTokens: the access line of a request carries the tokens the
// answer reported, whole or streamed.
func TestAccessLogTokens(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(`"stream":true`)) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}`+"\n\n"+
				`data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}`+"\n\n"+"data: [DONE]\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`)
	}))
	defer up.Close()
	var logs bytes.Buffer
	p, err := proxy.New(proxy.Options{Upstream: up.URL, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	for _, body := range []string{`{"model":"m","messages":[]}`, `{"model":"m","stream":true,"messages":[]}`} {
		resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	front.Close() // waits for the handlers, and so for their access lines
	var got [][2]float64
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "request" {
			in, _ := rec["input_tokens"].(float64)
			out, _ := rec["output_tokens"].(float64)
			got = append(got, [2]float64{in, out})
		}
	}
	if len(got) != 2 || got[0] != [2]float64{12, 5} || got[1] != [2]float64{7, 3} {
		t.Errorf("access lines' tokens %v; want [12 5] and [7 3]\n%s", got, logs.String())
	}
}

// accessLines returns the access lines in logs, decoded.
func accessLines(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line that is not JSON: %q", line)
		}
		if rec["msg"] == "request" {
			lines = append(lines, rec)
		}
	}
	return lines
}

// TestAccessLogKindsIsAList: the kinds are the verdicts of a request's
// failed attempts, one each: a list, empty for a first attempt that
// succeeded (never null), and for a request its breaker refused (no
// attempt, no verdict); a retry the breaker refused adds none.
func TestAccessLogKindsIsAList(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 || r.URL.Path == "/v1/down" {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, `{}`)
	})
	front, logs := serveProxy(t, proxy.Options{Upstream: up.URL, Policy: noWait,
		Breaker: func(key string) rebound.Breaker {
			return breaker.New(key, breaker.Config{ConsecutiveFailures: 2, Cooldown: time.Hour})
		}})
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`) // a retry, then the answer
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`)
	do(t, "POST", front.URL+"/v1/down", `{"model":"d"}`) // two failures open the breaker, which refuses the third attempt
	do(t, "POST", front.URL+"/v1/down", `{"model":"d"}`) // refused before any attempt
	front.Close()
	lines := accessLines(t, logs.String())
	if len(lines) != 4 {
		t.Fatalf("%d access lines, want 4:\n%s", len(lines), logs)
	}
	for i, want := range []string{`["transient"]`, `[]`, `["transient","transient"]`, `[]`} {
		got, _ := json.Marshal(lines[i]["kinds"])
		if string(got) != want {
			t.Errorf("request %d: kinds %s, want %s", i+1, got, want)
		}
	}
}

// TestAccessLogStreams: a streamed answer's access line says it was a
// stream, and carries the tokens the stream reported: in its events, or
// in the chunks of Gemini's stream as it comes without alt=sse (a JSON
// array). An OpenAI stream reports none unless the client asks for them
// (stream_options.include_usage): its line has none.
func TestAccessLogStreams(t *testing.T) {
	const (
		chatStream  = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
		usageChunk  = "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3,\"total_tokens\":10}}\n\n"
		geminiArray = `[{"candidates":[{"content":{"parts":[{"text":"hi"}],"role":"model"},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":8,"candidatesTokenCount":2,"totalTokenCount":10}}]`
	)
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/v1beta/models/g:streamGenerateContent":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, geminiArray)
		case "/v1/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, chatStream[:strings.Index(chatStream, "data: [DONE]")])
			if n == 1 {
				io.WriteString(w, usageChunk)
			}
			io.WriteString(w, "data: [DONE]\n\n")
		default:
			io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":5}}`)
		}
	})
	front, logs := serveProxy(t, proxy.Options{Upstream: up.URL})
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`)
	do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m","stream":true}`)
	do(t, "POST", front.URL+"/v1beta/models/g:streamGenerateContent", `{"contents":[]}`)
	do(t, "POST", front.URL+"/v1/embeddings", `{"model":"m","input":"hi"}`)
	front.Close()
	lines := accessLines(t, logs.String())
	if len(lines) != 4 {
		t.Fatalf("%d access lines, want 4:\n%s", len(lines), logs)
	}
	for i, want := range []struct {
		stream  bool
		in, out float64 // 0: none logged
	}{{true, 7, 3}, {true, 0, 0}, {true, 8, 2}, {false, 12, 5}} {
		stream, marked := lines[i]["stream"].(bool)
		in, _ := lines[i]["input_tokens"].(float64)
		out, _ := lines[i]["output_tokens"].(float64)
		if stream != want.stream || marked != want.stream || in != want.in || out != want.out {
			t.Errorf("request %d: stream %v (field present %v), tokens %v/%v; want stream %v, tokens %v/%v",
				i+1, stream, marked, in, out, want.stream, want.in, want.out)
		}
	}
}

// usageObserver is an Observer that notes the usage it is told of, by
// target.
type usageObserver struct {
	mu    sync.Mutex
	usage map[string]cost.Usage
}

func (*usageObserver) Observe(rebound.Event) {}

func (o *usageObserver) RecordUsage(_ context.Context, target string, u cost.Usage) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.usage == nil {
		o.usage = map[string]cost.Usage{}
	}
	o.usage[target] = u
}

// TestObserverHearsTheUsageOfTheAttemptThatAnswered: an Observer with a
// RecordUsage method is told each answer's tokens, the cache's apart,
// under the target of the upstream that answered, here a fallback.
func TestObserverHearsTheUsageOfTheAttemptThatAnswered(t *testing.T) {
	down, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusServiceUnavailable) })
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":900}}}`)
	})
	obs := &usageObserver{}
	js := `{"upstreams":{"down":{"url":"` + down.URL + `"},"up":{"url":"` + up.URL + `"}},
		"routes":[{"upstream":"down","fallbacks":[{"upstream":"up","model":"m"}],"policy":{"max_attempts":1}}]}`
	front, _ := serveProxy(t, proxy.Options{Config: config(t, js, nil), Observer: obs})
	if resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	front.Close() // the access line, and the usage with it, is written
	obs.mu.Lock()
	defer obs.mu.Unlock()
	want := cost.Usage{InputTokens: 100, CacheReadTokens: 900, OutputTokens: 7}
	if len(obs.usage) != 1 || obs.usage["up:m"] != want {
		t.Errorf("the observer was told %+v, want %+v under up:m", obs.usage, want)
	}
}
