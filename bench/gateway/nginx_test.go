package main

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// needNginx installs Debian's nginx as run.sh does, if it is missing.
func needNginx(t *testing.T) {
	t.Helper()
	if _, err := nginxBinary(); err == nil {
		return
	}
	if out, err := exec.Command("apt-get", "install", "-y", "-q", "nginx").CombinedOutput(); err != nil {
		t.Fatalf("nginx is missing and apt-get install failed: %v: %s", err, out)
	}
}

// TestNginxHandsOnEachEventAsItComes checks the configuration the
// benchmark runs nginx with: an event is passed on before the upstream
// sends the next one, so that nginx is measured as a streaming proxy and
// not a buffering one. The upstream holds its second event until the
// first has come out of nginx; a buffering nginx would hold both.
func TestNginxHandsOnEachEventAsItComes(t *testing.T) {
	needNginx(t)
	firstOut := make(chan struct{})
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Connection") == "close" {
			t.Errorf("nginx asked the upstream to close its connection: no keep-alive pool")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write([]byte("data: {\"delta\":\"one\"}\n\n"))
		w.(http.Flusher).Flush()
		select {
		case <-firstOut:
		case <-r.Context().Done():
			return
		}
		w.Write([]byte("data: [DONE]\n\n"))
	}))
	defer upstream.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, tg, stop, err := startNginx(ctx, upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tg.url, strings.NewReader(string(streamed.body())))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	if !lines.Scan() || lines.Text() != `data: {"delta":"one"}` {
		t.Fatalf("first line %q, %v: the first event did not come through on its own", lines.Text(), lines.Err())
	}
	close(firstOut)
	var rest []string
	for lines.Scan() {
		rest = append(rest, lines.Text())
	}
	if got := strings.Join(rest, "|"); got != "|data: [DONE]|" {
		t.Errorf("after the first event: %q, %v", got, lines.Err())
	}
}

// TestNginxLeavesNothingBehind checks that a stopped nginx leaves neither
// its temporary folder nor a process listening.
func TestNginxLeavesNothingBehind(t *testing.T) {
	needNginx(t)
	upstream := httptest.NewServer(http.HandlerFunc(answer))
	defer upstream.Close()
	c, tg, stop, err := startNginx(context.Background(), upstream.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(tg.url, "application/json", strings.NewReader(string(plain.body())))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("through nginx: %v %v", resp, err)
	}
	resp.Body.Close()
	dir := c.cmd.Args[2]
	stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("its folder is still there: %v", err)
	}
	if c.cmd.ProcessState == nil {
		t.Errorf("nginx still runs")
	}
	if conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(tg.url, "/v1/chat/completions"), "http://")); err == nil {
		conn.Close()
		t.Errorf("something still listens where nginx did")
	}
}

func TestStartNginxRefusesAnUpstreamThatIsNotAURL(t *testing.T) {
	needNginx(t)
	if _, _, _, err := startNginx(context.Background(), "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "is not a URL") {
		t.Errorf("error %v, want one saying the upstream is not a URL", err)
	}
}
