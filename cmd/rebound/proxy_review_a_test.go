package main

// The tests of this file come from an adversarial review of "rebound
// proxy": each names a defect it found, and now shows it fixed.

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReviewProxySecondSignal: during a long drain, a second SIGINT (the
// operator's Ctrl-C again) should stop the proxy at once; it is swallowed
// and the proxy waits out --drain-timeout.
func TestReviewProxySecondSignal(t *testing.T) {
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

// TestReviewProxySecretsInUsageErrors: a typo in a URL that carries a
// credential prints the credential on stderr (into the logs of whatever
// runs the proxy).
func TestReviewProxySecretsInUsageErrors(t *testing.T) {
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

// TestReviewProxySlowBody: ReadHeaderTimeout bounds the headers only; a
// client (with a token, or any local process on loopback) that sends its
// headers and then the body a byte at a time, or never, holds a
// connection, a goroutine and up to --max-body of memory for ever.
// Slow: fails after 15 s of wall time.
func TestReviewProxySlowBody(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	url, _, _ := startProxy(t, "--upstream", up.URL)
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n\r\n{")
	conn.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Errorf("a body that never ends held the connection for 15 s (ReadHeaderTimeout is 10 s)")
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
