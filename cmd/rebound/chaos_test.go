package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the server's goroutines to write to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startChaos runs "rebound chaos" with args on a free port. It returns the
// server's URL and a function that stops it and returns the exit code.
func startChaos(t *testing.T, args ...string) (url string, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- runChaos(ctx, append([]string{"--addr", "127.0.0.1:0"}, args...), pw, &stderr)
		pw.Close()
	}()
	stop = func() int {
		cancel()
		select {
		case c := <-code:
			if c != 0 {
				t.Logf("stderr %q", stderr.String())
			}
			return c
		case <-time.After(10 * time.Second):
			t.Fatal("runChaos did not return after cancel")
			return -1
		}
	}

	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		stop()
		t.Fatalf("reading first stdout line: %v (stderr %q)", err, stderr.String())
	}
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[1-9][0-9]*)\n$`).FindStringSubmatch(line)
	if m == nil {
		stop()
		t.Fatalf("first stdout line %q, want listening on http://127.0.0.1:PORT", line)
	}
	return m[1], stop
}

// call sends a request with the given mode (none if "") and returns the
// response with its body read.
func call(t *testing.T, method, url, mode string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	if mode != "" {
		req.Header.Set("X-Chaos-Mode", mode)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestRunChaos(t *testing.T) {
	url, stop := startChaos(t, "--mode", "down")
	get := func(path, mode string) (int, string) {
		t.Helper()
		resp, body := call(t, "GET", url+path, mode)
		return resp.StatusCode, body
	}
	if status, _ := get("/", ""); status != 503 {
		t.Errorf("GET /: %d, want 503", status)
	}
	if status, _ := get("/", "ok"); status != 200 {
		t.Errorf("GET / in mode ok: %d, want 200", status)
	}
	want := `{"requests":2,"by_status":{"200":1,"503":1},"input_tokens":0,"output_tokens":0,` +
		`"tallies":{"":{"m":{"requests":2,"input_tokens":0,"output_tokens":0}}}}` + "\n"
	if status, body := get("/chaos/stats", ""); status != 200 || body != want {
		t.Errorf("GET /chaos/stats: %d %q, want 200 %q", status, body, want)
	}
	if c := stop(); c != 0 {
		t.Errorf("exit code %d after cancel, want 0", c)
	}
}

func TestRunChaosProfile(t *testing.T) {
	tests := []struct {
		args       []string
		mode       string
		status     int
		retryAfter string
		body       string // in the body
	}{
		{nil, "down", 503, "", `"type":"chaos_injected","code":"down"`},
		{[]string{"--retry-after", "2"}, "down", 503, "2", `"code":"down"`},
		{[]string{"--profile", "plain", "--retry-after", "1"}, "badreq", 400, "1", `"code":"badreq"`},
		{[]string{"--profile", "openai"}, "down", 503, "", `"type":"server_error","param":null,"code":null`},
		{[]string{"--profile", "openai"}, "retryafter", 429, "1", `"code":"rate_limit_exceeded"`},
		{[]string{"--profile", "anthropic", "--retry-after", "3"}, "overload", 529, "3", `"type":"overloaded_error"`},
		{[]string{"--profile", "gemini", "--retry-after", "4"}, "quota", 429, "", `"retryDelay":"4s"`},
		{[]string{"--profile", "gemini"}, "ok", 200, "", `"text":"Hello from chaos."`},
	}
	for _, tt := range tests {
		url, stop := startChaos(t, tt.args...)
		resp, body := call(t, "POST", url+"/v1/chat/completions", tt.mode)
		if resp.StatusCode != tt.status || resp.Header.Get("Retry-After") != tt.retryAfter || !strings.Contains(body, tt.body) {
			t.Errorf("%q, mode %s: %d Retry-After %q %s; want %d Retry-After %q and %s",
				tt.args, tt.mode, resp.StatusCode, resp.Header.Get("Retry-After"), body, tt.status, tt.retryAfter, tt.body)
		}
		if c := stop(); c != 0 {
			t.Errorf("%q: exit code %d after cancel, want 0", tt.args, c)
		}
	}
}

func TestRunChaosUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the stderr line
	}{
		{[]string{"--nope"}, "flag provided but not defined: --nope"},
		{[]string{"--seed", "x"}, `invalid value "x" for flag -seed`},
		{[]string{"serve"}, `unexpected argument "serve"`},
		{[]string{"--mode", "flaky"}, `unknown mode "flaky" (want ok, random, down`},
		{[]string{"--profile", "cohere"}, `unknown profile "cohere" (want plain, openai, anthropic, gemini, azure, bedrock, local)`},
		{[]string{"--fail-rate", "1.5"}, "--fail-rate 1.5 outside (0, 1]"},
		{[]string{"--fail-rate", "0"}, "--fail-rate 0 outside (0, 1]"},
		{[]string{"--retry-after", "0"}, "--retry-after 0"},
		{[]string{"--slow", "-1s"}, "--slow -1s"},
		// Absurd numbers are refused, none of them wrapping around.
		{[]string{"--retry-after", "9223372037"}, "--retry-after 9223372037 is beyond a year (want 1 to 31536000 seconds)"},
		{[]string{"--retry-after", "99999999999999"}, "--retry-after 99999999999999 is beyond a year"},
		{[]string{"--retry-after", "31536001"}, "--retry-after 31536001 is beyond a year"},
		{[]string{"--retry-after", "-9223372036854775808"}, "--retry-after -9223372036854775808 is not a positive number of seconds"},
		{[]string{"--retry-after", "1e3"}, `invalid value "1e3" for flag -retry-after`},
		{[]string{"--retry-after", "99999999999999999999"}, `invalid value "99999999999999999999" for flag -retry-after: value out of range`},
		{[]string{"--fail-rate", "NaN"}, "--fail-rate NaN outside (0, 1]"},
		{[]string{"--fail-rate", "Inf"}, "--fail-rate +Inf outside (0, 1]"},
		{[]string{"--fail-rate", "-Inf"}, "--fail-rate -Inf outside (0, 1]"},
		{[]string{"--fail-rate", "1e400"}, `invalid value "1e400" for flag -fail-rate: value out of range`},
		{[]string{"--slow", "0s"}, "--slow 0s is not a positive duration"},
		{[]string{"--slow", "3000000h"}, `invalid value "3000000h" for flag -slow`},
		{[]string{"--cut-after", "-9223372036854775808"}, "--cut-after -9223372036854775808 is negative"},
		{[]string{"--cut-after", "99999999999999999999"}, `invalid value "99999999999999999999" for flag -cut-after: value out of range`},
		{[]string{"--seed", "-1"}, `invalid value "-1" for flag -seed`},
		{[]string{"--addr", "nonsense"}, `--addr "nonsense": address nonsense: missing port in address (want host:port`},
		{[]string{"--addr", "127.0.0.1:99999"}, `--addr "127.0.0.1:99999": port "99999" is not a number from 0 to 65535`},
		{[]string{"--addr", "[::1]:0x"}, `port "0x" is not a number`},
	}
	// A canceled context makes a server that wrongly starts stop at once,
	// so that the test fails rather than hangs.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := runChaos(ctx, append([]string{"--addr", "127.0.0.1:0"}, tt.args...), &stdout, &stderr)
		msg := stderr.String()
		if code != 2 || stdout.Len() != 0 || strings.Count(msg, "\n") != 1 ||
			!strings.HasPrefix(msg, "rebound chaos: ") || !strings.Contains(msg, tt.want) {
			t.Errorf("runChaos(%q) = %d, stdout %q, stderr %q; want 2 and one line containing %q",
				tt.args, code, stdout.String(), msg, tt.want)
		}
	}
}

// TestRunChaosYearLongHint checks that a hint of a whole year, the longest
// taken at face value, is sent as it was given.
func TestRunChaosYearLongHint(t *testing.T) {
	url, stop := startChaos(t, "--mode", "retryafter", "--retry-after", "31536000")
	resp, _ := call(t, "GET", url, "")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "31536000" {
		t.Errorf("%d Retry-After %q, want 429 and 31536000", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if c := stop(); c != 0 {
		t.Errorf("exit code %d after cancel, want 0", c)
	}
}

func TestRunChaosHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runChaos(t.Context(), []string{"-h"}, &stdout, &stderr); code != 0 {
		t.Errorf("-h: exit code %d, want 0", code)
	}
	if stderr.Len() != 0 || !strings.HasPrefix(stdout.String(), "usage: rebound chaos") || !strings.Contains(stdout.String(), "-fail-rate") ||
		!strings.Contains(stdout.String(), "-profile") {
		t.Errorf("-h: stdout %q, stderr %q; want usage with flags on stdout", stdout.String(), stderr.String())
	}
}

func TestRunChaosListenError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var stdout, stderr bytes.Buffer
	code := runChaos(t.Context(), []string{"--addr", ln.Addr().String()}, &stdout, &stderr)
	if code != 1 || stdout.Len() != 0 || strings.Count(stderr.String(), "\n") != 1 {
		t.Errorf("address in use: code %d, stdout %q, stderr %q; want 1 and one line", code, stdout.String(), stderr.String())
	}
}

func TestRunChaosCutAfter(t *testing.T) {
	url, stop := startChaos(t, "--mode", "stream-cut", "--fail-rate", "1", "--cut-after", "2", "--profile", "anthropic")
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	for i := range 4 {
		req, err := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/messages", strings.NewReader(`{"model":"m","stream":true}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// An aborted stream ends in an error, an in-band one in an error
		// event; either way two pieces of text come first, and no more.
		body, readErr := io.ReadAll(resp.Body)
		resp.Body.Close()
		deltas := strings.Count(string(body), "event: content_block_delta\n")
		inBand := strings.Contains(string(body), "event: error\n")
		if resp.StatusCode != 200 || deltas != 2 || inBand == (readErr != nil) || strings.Contains(string(body), "message_stop") {
			t.Errorf("request %d: %d, %d deltas, in-band error %v, read error %v:\n%s", i, resp.StatusCode, deltas, inBand, readErr, body)
		}
	}
	if c := stop(); c != 0 {
		t.Errorf("exit code %d after cancel, want 0", c)
	}

	for _, c := range []struct{ args, want string }{
		{"--cut-after -1", "--cut-after -1 is negative"},
		{"--cut-after two", `invalid value "two" for flag -cut-after`},
	} {
		var stdout, stderr bytes.Buffer
		code := runChaos(t.Context(), strings.Fields(c.args), &stdout, &stderr)
		if msg := stderr.String(); code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, c.want) {
			t.Errorf("runChaos(%s) = %d, stderr %q; want 2 and one line containing %q", c.args, code, msg, c.want)
		}
	}
}

// TestRunChaos529 checks that a 529 goes out with its customary reason
// phrase, on a connection that stays open.
func TestRunChaos529(t *testing.T) {
	url, stop := startChaos(t, "--mode", "overload", "--profile", "anthropic")
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	reused := 0
	for i := range 2 {
		trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) {
			if c.Reused {
				reused++
			}
		}}
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "POST", url+"/v1/messages", strings.NewReader(`{"model":"m"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.Status != "529 Site is overloaded" {
			t.Errorf("request %d: status %q, want 529 Site is overloaded", i, resp.Status)
		}
	}
	if reused != 1 {
		t.Errorf("connection reused %d times, want 1", reused)
	}
	if c := stop(); c != 0 {
		t.Errorf("exit code %d after cancel, want 0", c)
	}
}
