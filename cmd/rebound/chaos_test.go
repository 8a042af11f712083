package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
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

func TestRunChaos(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	code := make(chan int, 1)
	go func() {
		code <- runChaos(ctx, []string{"--addr", "127.0.0.1:0", "--mode", "down"}, pw, &stderr)
		pw.Close()
	}()

	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading first stdout line: %v (stderr %q)", err, stderr.String())
	}
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[1-9][0-9]*)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first stdout line %q, want listening on http://127.0.0.1:PORT", line)
	}
	url := m[1]

	get := func(path, mode string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "GET", url+path, nil)
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
		return resp.StatusCode, string(body)
	}
	if status, _ := get("/", ""); status != 503 {
		t.Errorf("GET /: %d, want 503", status)
	}
	if status, _ := get("/", "ok"); status != 200 {
		t.Errorf("GET / in mode ok: %d, want 200", status)
	}
	want := `{"requests":2,"by_status":{"200":1,"503":1}}` + "\n"
	if status, body := get("/chaos/stats", ""); status != 200 || body != want {
		t.Errorf("GET /chaos/stats: %d %q, want 200 %q", status, body, want)
	}

	cancel()
	select {
	case c := <-code:
		if c != 0 {
			t.Errorf("exit code %d after cancel, want 0 (stderr %q)", c, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("runChaos did not return after cancel")
	}
}

func TestRunChaosUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the stderr line
	}{
		{[]string{"--nope"}, "flag provided but not defined: -nope"},
		{[]string{"--seed", "x"}, `invalid value "x" for flag -seed`},
		{[]string{"serve"}, `unexpected argument "serve"`},
		{[]string{"--mode", "flaky"}, `unknown mode "flaky" (want ok, random, down`},
		{[]string{"--fail-rate", "1.5"}, "--fail-rate 1.5 outside (0, 1]"},
		{[]string{"--fail-rate", "0"}, "--fail-rate 0 outside (0, 1]"},
		{[]string{"--retry-after", "0"}, "--retry-after 0"},
		{[]string{"--slow", "-1s"}, "--slow -1s"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := runChaos(t.Context(), tt.args, &stdout, &stderr)
		msg := stderr.String()
		if code != 2 || stdout.Len() != 0 || strings.Count(msg, "\n") != 1 ||
			!strings.HasPrefix(msg, "rebound chaos: ") || !strings.Contains(msg, tt.want) {
			t.Errorf("runChaos(%q) = %d, stdout %q, stderr %q; want 2 and one line containing %q",
				tt.args, code, stdout.String(), msg, tt.want)
		}
	}
}

func TestRunChaosHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := runChaos(t.Context(), []string{"-h"}, &stdout, &stderr); code != 0 {
		t.Errorf("-h: exit code %d, want 0", code)
	}
	if !strings.HasPrefix(stderr.String(), "usage: rebound chaos") || !strings.Contains(stderr.String(), "-fail-rate") {
		t.Errorf("-h: stderr %q, want usage with flags", stderr.String())
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
