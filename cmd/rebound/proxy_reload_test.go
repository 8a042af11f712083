package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// reloadUpstream answers a chat completion after a short while, and a
// streamed one with streamChunks events a few milliseconds apart, so that
// requests are in flight whenever the proxy is told to reload; it counts
// the requests it is answering.
type reloadUpstream struct {
	inFlight atomic.Int64
}

const streamChunks = 8

func (u *reloadUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.inFlight.Add(1)
	defer u.inFlight.Add(-1)
	body, _ := io.ReadAll(r.Body)
	pause := time.NewTimer(0)
	defer pause.Stop()
	wait := func() {
		pause.Reset(15 * time.Millisecond)
		select {
		case <-pause.C:
		case <-r.Context().Done():
		}
	}
	if !strings.Contains(string(body), `"stream":true`) {
		wait()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"message":{"role":"assistant","content":"whole"}}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for i := range streamChunks {
		wait()
		fmt.Fprintf(w, "data: {\"choices\":[{\"delta\":{\"content\":\"part%d \"}}]}\n\n", i)
		w.(http.Flusher).Flush()
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

// reloadConfig is the config of the reload scenario: upstreams a and b
// (both u), the chat route on a, falling back to b if fallback says so,
// and tenant "team" at rpm requests a minute (never reached).
func reloadConfig(url string, fallback bool, rpm int) string {
	fb := ""
	if fallback {
		fb = `, "fallbacks": [{"upstream": "b"}]`
	}
	return fmt.Sprintf(`{
	"upstreams": {"a": {"url": %q}, "b": {"url": %q}},
	"routes": [{"name": "chat", "path_prefix": "/v1/", "upstream": "a"%s}],
	"tenants": {"team": {"tokens_env": "TEST_RELOAD_TOKENS", "requests_per_minute": %d}}}`, url, url, fb, rpm)
}

// TestProxyReloadUnderLoadFailsNoRequest runs rebound proxy with a config,
// clients sending plain and streamed requests in a loop, and sends it
// SIGHUP after each of several new configs (a route's fallback toggled, a
// tenant's limit changed) and once after a bad one: every request gets
// the answer it would have got, the bad config is refused in one log
// line, and the log and /ui/status say which version is live.
func TestProxyReloadUnderLoadFailsNoRequest(t *testing.T) {
	up := &reloadUpstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	upstream := srv.URL
	t.Setenv("TEST_RELOAD_TOKENS", "tok-reload-secret")
	file := filepath.Join(t.TempDir(), "proxy.json")
	write := func(cfg string) string {
		if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(cfg))
		return hex.EncodeToString(sum[:6])
	}
	version := write(reloadConfig(upstream, false, 100000))

	proc := startLoggedProxy(t, "--config", file)
	url := proc.url
	liveVersion := func() string {
		t.Helper()
		resp, err := http.Get(url + "/ui/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct {
			ConfigVersion string `json:"config_version"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s.ConfigVersion
	}
	if l := proc.next(t); l["msg"] != "config loaded" || l["version"] != version {
		t.Fatalf("at start the log says %v, want config loaded, version %s", l, version)
	}

	// The load: clients in a loop until told to stop, half of them
	// streaming; each checks that it got the whole answer.
	stop := make(chan struct{})
	var sent, failed atomic.Int64
	var firstFailure sync.Once
	var failure atomic.Value
	completed := make(chan struct{}, 1024) // a request answered, whether well or not
	var clients sync.WaitGroup
	for i := range 6 {
		streaming := i%2 == 1
		clients.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				if err := reloadCall(client, url, streaming); err != nil {
					failed.Add(1)
					firstFailure.Do(func() { failure.Store(err.Error()) })
				}
				select {
				case completed <- struct{}{}:
				default:
				}
			}
		})
	}
	// Reloads: each under load, each config a change the load does not
	// notice, and one bad config in the middle.
	inFlightAtSignal := []int64{}
	hangup := func() {
		inFlightAtSignal = append(inFlightAtSignal, up.inFlight.Load())
		if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	configs := []string{
		reloadConfig(upstream, true, 100000),
		reloadConfig(upstream, true, 200000),
		`{"upstreams": {"a": {"url": "` + upstream + `"}}, "routes": [{"upstream": "nowhere"}]}`,
		reloadConfig(upstream, false, 200000),
		reloadConfig(upstream, false, 100000) + "\n",
	}
	// waitForLoad waits until n more requests were answered.
	waitForLoad := func(n int) {
		t.Helper()
		for drained := false; !drained; {
			select {
			case <-completed:
			default:
				drained = true
			}
		}
		for range n {
			select {
			case <-completed:
			case <-time.After(10 * time.Second):
				t.Fatal("the clients are not getting answers")
			}
		}
	}
	for i, cfg := range configs {
		waitForLoad(20)
		v := write(cfg)
		hangup()
		l := proc.next(t)
		if i == 2 {
			if l["msg"] != "config refused" || !strings.Contains(fmt.Sprint(l["error"]), "routes[0].upstream") || l["live_version"] != version {
				t.Errorf("a bad config: the log says %v, want config refused naming routes[0].upstream and the live version %s", l, version)
			}
			if got := liveVersion(); !strings.HasPrefix(got, version+", loaded ") {
				t.Errorf("after a refused config /ui/status says %q, want version %s", got, version)
			}
			continue
		}
		version = v
		if l["msg"] != "config loaded" || l["version"] != version {
			t.Errorf("reload %d: the log says %v, want config loaded, version %s", i+1, l, version)
		}
		if got := liveVersion(); !strings.HasPrefix(got, version+", loaded ") {
			t.Errorf("reload %d: /ui/status says version %q, want %s", i+1, got, version)
		}
	}
	waitForLoad(20)
	close(stop)
	clients.Wait()

	t.Logf("%d requests, %d failed; requests in flight upstream at each SIGHUP: %v", sent.Load(), failed.Load(), inFlightAtSignal)
	if failed.Load() > 0 {
		t.Errorf("%d of %d requests failed across the reloads; the first: %v", failed.Load(), sent.Load(), failure.Load())
	}
	held := 0
	for _, n := range inFlightAtSignal {
		if n > 0 {
			held++
		}
	}
	if held < len(inFlightAtSignal)/2 {
		t.Errorf("requests in flight at the signals %v: most reloads came with none in flight, so the test proved little", inFlightAtSignal)
	}
	for _, l := range proc.lines() {
		if strings.Contains(l, "DATA RACE") {
			t.Errorf("the proxy raced: %s", l)
		}
		if strings.Contains(l, "tok-reload-secret") {
			t.Errorf("a client token in the log: %s", l)
		}
		if strings.Contains(l, `"config refused"`) && strings.Count(l, "\n") > 0 {
			t.Errorf("a refusal of more than one line: %s", l)
		}
	}
}

// loggedProxy is a rebound proxy process and its log.
type loggedProxy struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex // guards all
	all  []string
	said chan map[string]any // those that say something of the config or SIGHUP
}

// startLoggedProxy runs "rebound proxy" with args as a process of its own,
// reading its log.
func startLoggedProxy(t *testing.T, args ...string) *loggedProxy {
	t.Helper()
	p := &loggedProxy{cmd: commandProcess(t, append([]string{"proxy", "--addr", "127.0.0.1:0"}, args...)...), said: make(chan map[string]any, 16)}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill(); p.cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading first stdout line: %v", err)
	}
	p.url = strings.TrimSpace(strings.TrimPrefix(line, "listening on "))
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			p.mu.Lock()
			p.all = append(p.all, s.Text())
			p.mu.Unlock()
			var l map[string]any
			if json.Unmarshal(s.Bytes(), &l) == nil && strings.Contains(fmt.Sprint(l["msg"]), "config") {
				p.said <- l
			}
		}
		close(p.said)
	}()
	return p
}

// next returns the next log line that says something of the config.
func (p *loggedProxy) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case l, ok := <-p.said:
		if !ok {
			t.Fatal("the proxy's log ended")
		}
		return l
	case <-time.After(10 * time.Second):
		t.Fatal("no line about the config in the log")
	}
	return nil
}

// lines returns the log so far.
func (p *loggedProxy) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.all)
}

func TestProxyWithoutConfigIgnoresSIGHUP(t *testing.T) {
	up := &reloadUpstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	proc := startLoggedProxy(t, "--upstream", srv.URL)
	if err := proc.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if l := proc.next(t); l["msg"] != "SIGHUP ignored: there is no --config to re-read" {
		t.Fatalf("the log says %v, want SIGHUP ignored", l)
	}
	if err := reloadCall(http.DefaultClient, proc.url, false); err != nil {
		t.Errorf("after SIGHUP: %v", err)
	}
}

// reloadCall sends a chat completion, streamed or not, as tenant team,
// and says what was wrong with its answer, if anything.
func reloadCall(client *http.Client, url string, stream bool) error {
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	if stream {
		body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	}
	req, err := http.NewRequest("POST", url+"/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer tok-reload-secret")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return fmt.Errorf("reading the answer: %v", err)
	case resp.StatusCode != 200:
		return fmt.Errorf("status %d: %.200s", resp.StatusCode, got)
	case !stream && !strings.Contains(string(got), `"content":"whole"`):
		return fmt.Errorf("answer %.200s", got)
	case stream && (strings.Count(string(got), "part") != streamChunks || !strings.HasSuffix(string(got), "data: [DONE]\n\n")):
		return fmt.Errorf("stream cut short: %.300s", got)
	}
	return nil
}
