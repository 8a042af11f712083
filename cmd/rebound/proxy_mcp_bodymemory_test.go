package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// openRawMCPSession initializes a session at endpoint over plain HTTP
// (no client of the SDK, which would open the session's GET stream
// itself) and returns its ID.
func openRawMCPSession(t *testing.T, endpoint string) string {
	t.Helper()
	resp, _ := post(t, endpoint, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`,
		"Accept", "application/json, text/event-stream")
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != 200 || id == "" {
		t.Fatalf("initialize: %d, session %q", resp.StatusCode, id)
	}
	post(t, endpoint, `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		"Accept", "application/json, text/event-stream", "Mcp-Session-Id", id, "Mcp-Protocol-Version", "2025-11-25")
	return id
}

// TestMCPEventStreamWithABodyDoesNotHoldBodyMemory: a session's GET (its
// event stream, open as long as the client likes) sent with a body as
// large as --max-body must not keep that body's memory for as long as the
// stream is open: a client with a few sessions would hold all of
// --max-body-memory, and every model call of every tenant would wait,
// then get a 503. Here one stream holds half of it, and a model call
// whose body fits in the other half is refused.
func TestMCPEventStreamWithABodyDoesNotHoldBodyMemory(t *testing.T) {
	upstream, _ := startChaos(t, "--mode", "ok")
	const max = 64 << 10
	url, logs, _ := startProxy(t, "--config", proxyMCPConfig(t, upstream, ""), "--max-body", "65536", "--max-body-memory", "131072")
	endpoint := url + "/mcp/everything"
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	for range 1 {
		id := openRawMCPSession(t, endpoint)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, strings.NewReader(strings.Repeat("x", max)))
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", id)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("GET stream: %d %s", resp.StatusCode, b)
		}
		// The stream is open once its first event (the priming one) is read.
		if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	resp, body := post(t, url+"/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("y", max-100)+`"}]}`)
	if resp.StatusCode != 200 {
		t.Errorf("model call of %d bytes while one MCP event stream with a body is open: %d %.200s (logs %.2000s)", max-50, resp.StatusCode, body, logs)
	}
}
