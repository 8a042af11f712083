package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rebound-go/rebound/chaos"
)

// startProxy runs "rebound proxy" with args on a free port, in process. It
// returns the proxy's URL, its stderr (the logs) and a function that stops
// it and returns the exit code.
func startProxy(t *testing.T, args ...string) (url string, logs *lockedBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	logs = &lockedBuffer{}
	code := make(chan int, 1)
	go func() {
		code <- runProxy(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), pw, logs)
		pw.Close()
	}()
	stopped := false
	stop = func() int {
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		select {
		case c := <-code:
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("runProxy did not return after cancel")
			return -1
		}
	}
	t.Cleanup(func() { stop() })
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		stop()
		t.Fatalf("reading first stdout line: %v (stderr %q)", err, logs.String())
	}
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[1-9][0-9]*)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first stdout line %q, want listening on http://127.0.0.1:PORT", line)
	}
	return m[1], logs, stop
}

// fakeUpstream is a test provider that counts its requests and keeps the last.
type fakeUpstream struct {
	*httptest.Server
	hits atomic.Int32
	mu   sync.Mutex // guards last and lastBody
	last *http.Request
	body string
}

func newUpstream(t *testing.T, h func(w http.ResponseWriter, r *http.Request, n int)) *fakeUpstream {
	u := &fakeUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := int(u.hits.Add(1))
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.last, u.body = r, string(b)
		u.mu.Unlock()
		h(w, r, n)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *fakeUpstream) lastRequest() (*http.Request, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last, u.body
}

func post(t *testing.T, url, body string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return resp, string(b)
}

const chatBody = `{"model":"gpt-x", "messages":[{"role":"user","content":"hello"}]}`

// TestProxyForwards: path, query, body and the client's own key reach the
// upstream unchanged; the answer comes back unchanged.
func TestProxyForwards(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Request-Id", "req-1")
		io.WriteString(w, `{"id":"x","choices":[]}`)
	})
	url, _, _ := startProxy(t, "--upstream", up.URL+"/base")
	resp, body := post(t, url+"/v1/chat/completions?api-version=2&x=%2F", chatBody, "Authorization", "Bearer sk-client-own-key-123456")
	if resp.StatusCode != 200 || body != `{"id":"x","choices":[]}` || resp.Header.Get("X-Request-Id") != "req-1" {
		t.Fatalf("got %d %q %v", resp.StatusCode, body, resp.Header)
	}
	r, got := up.lastRequest()
	if r.URL.Path != "/base/v1/chat/completions" || r.URL.RawQuery != "api-version=2&x=%2F" || got != chatBody {
		t.Errorf("upstream got %s %q body %q", r.URL.Path, r.URL.RawQuery, got)
	}
	if r.Header.Get("Authorization") != "Bearer sk-client-own-key-123456" {
		t.Errorf("the client's key did not pass through: %q", r.Header.Get("Authorization"))
	}
	// A body that is not JSON goes as it is: the upstream's 400 is the
	// truth. One sent as JSON must be strict JSON: the proxy reads its
	// model.
	post(t, url+"/v1/chat/completions", "plain text", "Content-Type", "text/plain")
	if _, got := up.lastRequest(); got != "plain text" {
		t.Errorf("a body that is not JSON reached the upstream as %q", got)
	}
	if resp, body := post(t, url+"/v1/chat/completions", `{"model": nope`); resp.StatusCode != 400 || !strings.Contains(body, "not strict JSON") || up.hits.Load() != 2 {
		t.Errorf("malformed JSON: %d %q, %d upstream requests; want a 400 and none more", resp.StatusCode, body, up.hits.Load())
	}
}

// sseEvents is an OpenAI chat stream, sent an event at a time.
var sseEvents = []string{
	"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n",
	"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
	": keep-alive\n\n",
	"data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}]}\n\n",
	"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
	"data: [DONE]\n\n",
}

func streamEvents(w http.ResponseWriter, events []string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	for _, e := range events {
		io.WriteString(w, e)
		w.(http.Flusher).Flush()
	}
}

// TestProxyStreamByteForByte: a stream reaches the client as the upstream
// sent it.
func TestProxyStreamByteForByte(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { streamEvents(w, sseEvents) })
	url, _, _ := startProxy(t, "--upstream", up.URL)
	resp, body := post(t, url+"/v1/chat/completions", `{"model":"gpt-x","stream":true}`)
	if want := strings.Join(sseEvents, ""); resp.StatusCode != 200 || body != want {
		t.Fatalf("got %d\n%q\nwant\n%q", resp.StatusCode, body, want)
	}
}

// abort breaks the connection mid-response.
func abort(w http.ResponseWriter) {
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

// TestProxyStreamBreaks: a stream that breaks before its first content is
// retried, and the client sees only the good one; one that breaks after
// reaches the client broken, and is not retried.
func TestProxyStreamBreaks(t *testing.T) {
	before := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			streamEvents(w, sseEvents[:1]) // the role, then nothing
			abort(w)
		}
		streamEvents(w, sseEvents)
	})
	url, _, _ := startProxy(t, "--upstream", before.URL)
	resp, body := post(t, url+"/v1/chat/completions", `{"model":"gpt-x","stream":true}`)
	if resp.StatusCode != 200 || body != strings.Join(sseEvents, "") || before.hits.Load() != 2 {
		t.Fatalf("broken before content: %d, %d upstream requests, body %q", resp.StatusCode, before.hits.Load(), body)
	}

	after := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		streamEvents(w, sseEvents[:2]) // the role and "Hel"
		abort(w)
	})
	url, _, _ = startProxy(t, "--upstream", after.URL)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-x","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || string(got) != strings.Join(sseEvents[:2], "") {
		t.Errorf("broken after content: read %q, %v; want the two events and an error", got, err)
	}
	if n := after.hits.Load(); n != 1 {
		t.Errorf("broken after content: %d upstream requests, want 1", n)
	}
}

// TestProxyRetries: a 429 with a wait is retried; an exhausted quota goes
// back to the client after one upstream request.
func TestProxyRetries(t *testing.T) {
	limited := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After-Ms", "20")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"type":"rate_limit_exceeded","code":"rate_limit_exceeded","message":"slow down"}}`)
			return
		}
		io.WriteString(w, `{"ok":true}`)
	})
	url, _, _ := startProxy(t, "--upstream", limited.URL)
	if resp, body := post(t, url+"/v1/chat/completions", chatBody); resp.StatusCode != 200 || limited.hits.Load() != 2 {
		t.Errorf("rate limited: %d %q after %d upstream requests, want 200 after 2", resp.StatusCode, body, limited.hits.Load())
	}

	const quota = `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`
	broke := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.WriteHeader(429)
		io.WriteString(w, quota)
	})
	url, _, _ = startProxy(t, "--upstream", broke.URL)
	if resp, body := post(t, url+"/v1/chat/completions", chatBody); resp.StatusCode != 429 || body != quota || broke.hits.Load() != 1 {
		t.Errorf("quota: %d %q after %d upstream requests, want 429 as sent after 1", resp.StatusCode, body, broke.hits.Load())
	}
}

// TestProxyTokens: a wrong or missing token gets a 401 without touching
// the upstream; a right one is replaced by the upstream's key.
func TestProxyTokens(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	t.Setenv("TEST_PROXY_TOKENS", "tok-alpha-0001, tok-beta-0002")
	t.Setenv("TEST_PROXY_KEY", "sk-upstream-key-abcdef")
	url, _, _ := startProxy(t, "--upstream", up.URL, "--token-env", "TEST_PROXY_TOKENS", "--key-env", "TEST_PROXY_KEY")
	for _, h := range [][]string{nil, {"Authorization", "Bearer tok-alpha-0003"}, {"x-api-key", "tok-beta-000"}, {"Authorization", "tok-alpha-0001"}} {
		resp, body := post(t, url+"/v1/messages", `{"model":"claude"}`, h...)
		var e map[string]any
		if resp.StatusCode != 401 || json.Unmarshal([]byte(body), &e) != nil {
			t.Errorf("with %q: %d %q, want a 401 in JSON", h, resp.StatusCode, body)
		}
	}
	if n := up.hits.Load(); n != 0 {
		t.Fatalf("the upstream saw %d requests without a token", n)
	}
	if resp, _ := post(t, url+"/v1/messages", `{"model":"claude"}`, "x-api-key", "tok-beta-0002"); resp.StatusCode != 200 {
		t.Fatalf("right token: %d", resp.StatusCode)
	}
	r, _ := up.lastRequest()
	if r.Header.Get("X-Api-Key") != "sk-upstream-key-abcdef" || r.Header.Get("Authorization") != "" {
		t.Errorf("upstream got x-api-key %q, authorization %q", r.Header.Get("X-Api-Key"), r.Header.Get("Authorization"))
	}
}

// TestProxyUsage: bad usage exits 2 with a one-line reason.
func TestProxyUsage(t *testing.T) {
	dir := t.TempDir()
	file := func(s string) string {
		f, _ := os.CreateTemp(dir, "*.json")
		f.WriteString(s)
		f.Close()
		return f.Name()
	}
	t.Setenv("TEST_PROXY_SET", "sk-set-0123456789")
	os.Unsetenv("TEST_PROXY_UNSET")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "0.0.0.0:0", "--upstream", "http://127.0.0.1:1"}, "not a loopback address"},
		{nil, "give --upstream URL or --config FILE"},
		{[]string{"--upstream", "ftp://x"}, "not an http or https URL"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--max-queue-wait", "0s"}, "--max-queue-wait 0s: want a positive duration"},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"routes":[{"upstream":"b"}]}`)}, `routes[0].upstream: unknown upstream "b"`},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1","key_env":"TEST_PROXY_UNSET"}}}`)}, "upstreams.a.key_env: environment variable TEST_PROXY_UNSET is not set"},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"routes":[{"upstream":"a","policy":{"max_attempts":-1}}]}`)}, "routes[0].policy: max_attempts"},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"route":[]}`)}, `unknown field "route"`},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1","dialect":"anthropic"},"b":{"url":"http://127.0.0.1:2"}},"routes":[{"upstream":"a","fallbacks":[{"upstream":"b"}]}]}`)}, "speaks openai"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--max-body-memory", "-1"}, "--max-body-memory -1"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--max-body", "1000", "--max-body-memory", "1999"}, "at least twice --max-body"},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"routes":[{"upstream":"a","max_body_bytes":1000}]}`), "--max-body", "10", "--max-body-memory", "1999"}, "under twice the largest body cap (1000 bytes)"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--allow-origin", "*"}, "without client tokens"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--allow-origin", "app.example.com"}, "not scheme://host"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--allow-host", "proxy.internal:8080"}, "without a port"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--replicas", "0"}, "--replicas 0: want a number of processes from 1 to 10000"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--redis-timeout", "0s"}, "--redis-timeout 0s: want a duration above zero and at most 10s"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--redis-timeout", "1h"}, "--redis-timeout 1h0m0s: want a duration above zero and at most 10s"},
		{[]string{"--upstream", "http://127.0.0.1:1", "--redis-prefix", ""}, "--redis-prefix is empty"},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"tenants":{"t":{"tokens_env":"TEST_PROXY_UNSET"}}}`)}, "tenants.t.tokens_env: environment variable TEST_PROXY_UNSET is not set"},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"tenants":{"t":{"tokens_env":"TEST_PROXY_SET","spend_cap_usd":-5,"models":["m"]}},"prices":{"m":{}}}`)}, "tenants.t.spend_cap_usd: -5 is negative"},
		{[]string{"--config", file(`{"upstreams":{"a":{"url":"http://127.0.0.1:1"}},"tenants":{"default":{"spend_cap_usd":1,"models":["m"]}},"prices":{"m":{}}}`)}, "tenants.default: no tokens: give tokens_env, or --token-env"},
	} {
		code, stdout, stderr := runCmd(append([]string{"proxy"}, c.args...)...)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and one line with %q", c.args, code, stderr, c.want)
		}
	}
	// A config with several mistakes names each, a line apiece.
	two := file(`{"upstreams":{"a":{"url":"ftp://127.0.0.1:1","dialect":"klingon"}},"routes":[{"upstream":"b"}]}`)
	code, stdout, stderr := runCmd("proxy", "--config", two)
	want := "rebound proxy: config: upstreams.a.url: \"ftp://127.0.0.1:1\" is not an http or https URL\n" +
		"rebound proxy: config: upstreams.a.dialect: \"klingon\" is not openai, anthropic or gemini\n" +
		"rebound proxy: config: routes[0].upstream: unknown upstream \"b\"\n"
	if code != 2 || stdout != "" || stderr != want {
		t.Errorf("three mistakes: exit %d, stderr %q; want 2 and %q", code, stderr, want)
	}
}

// TestProxyAnswersItself: a body over the cap gets a 413 in its dialect; an
// unknown route a 404 in JSON; /healthz, /readyz and /metrics answer.
func TestProxyAnswersItself(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	config := filepath.Join(t.TempDir(), "proxy.json")
	os.WriteFile(config, []byte(`{"upstreams":{"a":{"url":"`+up.URL+`","dialect":"anthropic"},"g":{"url":"`+up.URL+`","dialect":"gemini"}},
		"routes":[{"path_prefix":"/v1/messages","upstream":"a","max_body_bytes":40},{"path_prefix":"/v1beta/","upstream":"g","max_body_bytes":40}],"pass_client_key":true}`), 0o600)
	url, _, _ := startProxy(t, "--config", config)
	big := `{"model":"m","messages":"` + strings.Repeat("x", 100) + `"}`
	resp, body := post(t, url+"/v1/messages", big)
	if resp.StatusCode != 413 || !strings.HasPrefix(body, `{"type":"error","error":{"type":"request_too_large"`) {
		t.Errorf("anthropic: %d %q", resp.StatusCode, body)
	}
	resp, body = post(t, url+"/v1beta/models/gemini-x:generateContent", `{"contents":"`+strings.Repeat("x", 100)+`"}`)
	if resp.StatusCode != 413 || !strings.HasPrefix(body, `{"error":{"code":413,`) {
		t.Errorf("gemini: %d %q", resp.StatusCode, body)
	}
	resp, body = post(t, url+"/v2/unknown", `{}`)
	if resp.StatusCode != 404 || !json.Valid([]byte(body)) || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("unknown route: %d %q", resp.StatusCode, body)
	}
	if up.hits.Load() != 0 {
		t.Errorf("the upstream saw %d requests", up.hits.Load())
	}
	post(t, url+"/v1/messages", `{"model":"m"}`) // a call, for the metrics
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready", "/metrics": "rebound_"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("%s: %d %.200q", path, resp.StatusCode, b)
		}
	}
}

// TestProxyFallback: an upstream out of quota hands the request to its
// fallback, with the model renamed and the rest of the body as it was.
func TestProxyFallback(t *testing.T) {
	primary := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.WriteHeader(429)
		io.WriteString(w, `{"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"quota"}}`)
	})
	second := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{"from":"second"}`) })
	config := filepath.Join(t.TempDir(), "proxy.json")
	os.WriteFile(config, []byte(`{"upstreams":{"p":{"url":"`+primary.URL+`"},"s":{"url":"`+second.URL+`"}},
		"routes":[{"model":"gpt-x","upstream":"p","fallbacks":[{"upstream":"s","model":"gpt-y"}]}]}`), 0o600)
	url, logs, stop := startProxy(t, "--config", config)
	for range 2 {
		if resp, body := post(t, url+"/v1/chat/completions", chatBody); resp.StatusCode != 200 || body != `{"from":"second"}` {
			t.Fatalf("%d %q", resp.StatusCode, body)
		}
	}
	if _, got := second.lastRequest(); got != strings.Replace(chatBody, `"gpt-x"`, `"gpt-y"`, 1) {
		t.Errorf("the fallback got %q", got)
	}
	if n := primary.hits.Load(); n != 1 {
		t.Errorf("the primary got %d requests, want 1 (then cooling down)", n)
	}
	stop() // an answer leaves before its access line: the lines are all written once the server has shut down
	if !strings.Contains(logs.String(), `"skipped":["p"]`) {
		t.Errorf("no skip in the log:\n%s", logs)
	}
}

// TestProxyFlakyUpstream: with one upstream failing 35% of its attempts
// (seeded), the breaker never refuses a call, and retries carry nearly
// every one of 200 calls.
func TestProxyFlakyUpstream(t *testing.T) {
	srv, err := chaos.New(chaos.Config{Mode: chaos.ModeRandom, FailRate: 0.35, Seed: 7, Profile: chaos.ProfileOpenAI})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(srv)
	defer up.Close()
	t.Logf("chaos seed 7, fail rate 0.35")
	config := filepath.Join(t.TempDir(), "proxy.json")
	os.WriteFile(config, []byte(`{"upstreams":{"c":{"url":"`+up.URL+`"}},"pass_client_key":true,
		"policy":{"max_attempts":4,"base_delay_ms":1,"max_delay_ms":5}}`), 0o600)
	url, logs, _ := startProxy(t, "--config", config)
	ok := 0
	for range 200 {
		resp, body := post(t, url+"/v1/chat/completions", chatBody)
		switch {
		case resp.StatusCode == 200:
			ok++
		case strings.Contains(body, "circuit open"):
			t.Fatalf("the breaker refused a call of a flaky upstream:\n%s", logs)
		}
	}
	if ok < 190 {
		t.Errorf("%d of 200 calls succeeded, want at least 190", ok)
	}
	if strings.Contains(logs.String(), `"msg":"breaker"`) {
		t.Errorf("the breaker moved:\n%s", logs)
	}
}

// TestProxyNoCredentialInLogs: no key or token shows in any log line, even
// when the upstream echoes them in its errors.
func TestProxyNoCredentialInLogs(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.WriteHeader(401)
		fmt.Fprintf(w, `{"error":{"message":"bad key %s %s"}}`, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
	})
	const key, token, clientKey = "sk-upstream-secret-778899", "tok-secret-445566", "client-own-secret-112233"
	t.Setenv("TEST_PROXY_TOKENS", token)
	t.Setenv("TEST_PROXY_KEY", key)
	url, logs, stop := startProxy(t, "--upstream", up.URL, "--token-env", "TEST_PROXY_TOKENS", "--key-env", "TEST_PROXY_KEY")
	post(t, url+"/v1/chat/completions", chatBody, "Authorization", "Bearer "+token)
	post(t, url+"/v1/chat/completions", chatBody, "Authorization", "Bearer "+clientKey)
	post(t, url+"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"secret prompt"}]}`, "x-api-key", token)
	dead := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	})
	url2, logs2, stop2 := startProxy(t, "--upstream", dead.URL+"/"+clientKey, "--attempt-timeout", "1s")
	post(t, url2+"/v1/chat/completions?key="+clientKey, chatBody, "Authorization", "Bearer "+clientKey)
	stop()
	stop2()
	all := logs.String() + logs2.String()
	if strings.Count(all, `"msg":"request"`) < 4 {
		t.Fatalf("want 4 access log lines:\n%s", all)
	}
	for _, s := range []string{key, token, clientKey, "secret prompt"} {
		if strings.Contains(all, s) {
			t.Errorf("%q is in the logs:\n%s", s, all)
		}
	}
}

// TestProxyDrainsStream: SIGTERM stops the proxy accepting, and a stream
// in flight finishes before it exits 0.
func TestProxyDrainsStream(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		streamEvents(w, sseEvents[:2])
		<-release
		for _, e := range sseEvents[2:] {
			io.WriteString(w, e)
		}
	})
	cmd := commandProcess(t, "proxy", "--addr", "127.0.0.1:0", "--upstream", up.URL)
	stdout, _ := cmd.StdoutPipe()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		t.Fatalf("first line: %v (stderr %q)", err, stderr.String())
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-x","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	if l, err := r.ReadString('\n'); err != nil || !strings.Contains(l, "assistant") {
		t.Fatalf("first line of the stream %q, %v", l, err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	// The proxy stops accepting: a new connection is refused once the
	// listener is closed; the stream in flight goes on.
	for {
		c, err := http.Get(url + "/healthz")
		if err != nil {
			break
		}
		c.Body.Close()
		runtime.Gosched()
	}
	close(release)
	rest, err := io.ReadAll(r)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Fatalf("the stream did not finish: %q, %v", rest, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v (stderr %s)", err, stderr.String())
	}
}

// TestProxyHelp: the help, asked for, goes to stdout with the flags.
func TestProxyHelp(t *testing.T) {
	code, help, stderr := runCmd("help", "proxy")
	if code != 0 || stderr != "" || !strings.HasPrefix(help, "usage: rebound proxy") || !strings.Contains(help, "\n  -token-env") {
		t.Errorf("help proxy: exit %d, stderr %q, stdout %q", code, stderr, help)
	}
	if code, stdout, _ := runCmd("proxy", "--upstream", "http://x", "-h"); code != 0 || stdout != help {
		t.Errorf("proxy -h: exit %d, stdout %q", code, stdout)
	}
}

// TestProxyBreakerCounts: rate limits with a server wait never open the
// breaker; a dead upstream does, and is then refused without a request.
func TestProxyBreakerCounts(t *testing.T) {
	for _, c := range []struct {
		name     string
		header   string
		status   int
		wantOpen bool
	}{
		{"rate limited with a wait", "Retry-After-Ms", 429, false},
		{"down", "", 503, true},
	} {
		up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if c.header != "" {
				w.Header().Set(c.header, "1")
			}
			w.WriteHeader(c.status)
			io.WriteString(w, `{"error":{"message":"no"}}`)
		})
		config := filepath.Join(t.TempDir(), "proxy.json")
		os.WriteFile(config, []byte(`{"upstreams":{"u":{"url":"`+up.URL+`"}},"pass_client_key":true,"policy":{"max_attempts":1}}`), 0o600)
		url, logs, _ := startProxy(t, "--config", config)
		refused := 0
		for range 30 {
			if _, body := post(t, url+"/v1/chat/completions", chatBody); strings.Contains(body, "circuit open") {
				refused++
			}
		}
		if open := refused > 0; open != c.wantOpen || int(up.hits.Load())+refused != 30 {
			t.Errorf("%s: %d of 30 refused, %d sent; want open %v\n%s", c.name, refused, up.hits.Load(), c.wantOpen, logs)
		}
	}
}

// TestProxyRedis: with --redis, the shared breakers, pace and cool-downs
// are in the path, and requests go through as without.
func TestProxyRedis(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	// RESP2: go-redis v9.23, in RESP3's default "auto" maintenance
	// notifications, races with itself when several connections shake
	// hands at once, as Store.Warm makes them.
	url, logs, _ := startProxy(t, "--upstream", up.URL, "--redis", "redis://127.0.0.1:6379/0?protocol=2")
	model := fmt.Sprintf("proxy-test-%d", time.Now().UnixNano())
	for range 3 {
		if resp, body := post(t, url+"/v1/chat/completions", `{"model":"`+model+`"}`); resp.StatusCode != 200 {
			t.Fatalf("%d %q\n%s", resp.StatusCode, body, logs)
		}
	}
	if n := up.hits.Load(); n != 3 {
		t.Errorf("%d upstream requests, want 3", n)
	}
}

// TestProxySecondSignalStopsDrain: during a long drain, a second SIGINT
// (the operator's Ctrl-C again) stops the proxy at once rather than
// waiting out --drain-timeout.
func TestProxySecondSignalStopsDrain(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		streamEvents(w, sseEvents[:2])
		<-r.Context().Done()
	})
	cmd := commandProcess(t, "proxy", "--addr", "127.0.0.1:0", "--upstream", up.URL, "--drain-timeout", "1h")
	stdout, _ := cmd.StdoutPipe()
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	req, _ := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	bufio.NewReader(resp.Body).ReadString('\n')
	cmd.Process.Signal(syscall.SIGINT)
	for !strings.Contains(stderr.String(), `"msg":"draining"`) {
		runtime.Gosched()
	}
	cmd.Process.Signal(syscall.SIGINT)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Errorf("a second SIGINT did not stop the proxy: it waits out --drain-timeout 1h (kill -9 is the only way out)")
	}
}

// TestProxyUsageErrorsHideCredentials: a typo in a URL that carries a
// credential is reported without the credential, which would otherwise go
// to stderr and into the logs of whatever runs the proxy.
func TestProxyUsageErrorsHideCredentials(t *testing.T) {
	for _, args := range [][]string{
		{"--upstream", "http://127.0.0.1:1", "--redis", "redis://:hunter2-redis-pw@redis.internal:63 79/0"},
		{"--upstream", "htps://user:hunter2-basic-pw@gw.internal"},
	} {
		_, _, stderr := runCmd(append([]string{"proxy"}, args...)...)
		if strings.Contains(stderr, "hunter2") {
			t.Errorf("%q: stderr shows the credential: %s", args, stderr)
		}
	}
}

// TestProxyRedisEnv: --redis-env reads the Redis URL from the environment,
// and says so when the variable is not set.
func TestProxyRedisEnv(t *testing.T) {
	code, _, stderr := runCmd("proxy", "--upstream", "http://127.0.0.1:1", "--redis-env", "REBOUND_TEST_UNSET_REDIS_URL")
	if code != 2 || !strings.Contains(stderr, "REBOUND_TEST_UNSET_REDIS_URL is not set") {
		t.Errorf("exit %d, stderr %s", code, stderr)
	}
}
