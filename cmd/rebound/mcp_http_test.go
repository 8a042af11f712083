package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// startHTTP starts "rebound mcp --addr 127.0.0.1:0 args..." and returns
// it and its endpoint, from the first line of its stdout.
func startHTTP(t *testing.T, env []string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd := mcpProcess(t, append([]string{"--addr", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(cmd.Env, env...)
	return cmd, startListening(t, cmd)
}

// startListening starts cmd, a "rebound mcp --addr", and returns its
// endpoint, from the first line of its stdout.
func startListening(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	endpoint, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok || !strings.HasSuffix(endpoint, "/mcp") {
		t.Fatalf("first line %q (%v), want listening on http://HOST:PORT/mcp", line, err)
	}
	return endpoint
}

// postInitialize sends an initialize to endpoint with the header pairs given (a
// "Host" pair sets the Host) and returns the status and body.
func postInitialize(t *testing.T, endpoint string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), "POST", endpoint, strings.NewReader(initializeBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, string(body)
}

// refusedAsJSONRPC checks a refusal's status and that its body is a
// JSON-RPC error.
func refusedAsJSONRPC(t *testing.T, what string, status int, body string, want int) {
	t.Helper()
	var msg struct {
		JSONRPC string `json:"jsonrpc"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if status != want || json.Unmarshal([]byte(body), &msg) != nil || msg.JSONRPC != "2.0" || msg.Error.Message == "" {
		t.Errorf("%s: %d %s, want a %d with a JSON-RPC error", what, status, body, want)
	}
}

// serverStarts returns the pids the test server wrote to its mark file,
// one a start.
func serverStarts(t *testing.T, mark string) []int {
	t.Helper()
	data, err := os.ReadFile(mark)
	if os.IsNotExist(err) {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		if n, err := strconv.Atoi(f); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// stop sends SIGTERM and checks the command exits 0 within a minute.
func stop(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("rebound mcp did not exit within a minute of SIGTERM")
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// TestMCPHTTPHostRule: without tokens, a request for a foreign Host (a
// page that rebound its name to 127.0.0.1) or from a foreign page gets a
// 403 with a JSON-RPC error, and no server is ever started for it; the Go
// SDK's client of the session protocol at the loopback address is served,
// one server per session, which its DELETE ends; SIGTERM exits 0.
func TestMCPHTTPHostRule(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "starts")
	cmd, endpoint := startHTTP(t, nil, testServer(mark)...)
	for _, h := range [][]string{
		{"Host", "example.com"},
		{"Host", "localhost.example.com:8080"},
		{"Origin", "https://evil.example"},
		{"Sec-Fetch-Site", "cross-site"},
	} {
		status, body := postInitialize(t, endpoint, h...)
		refusedAsJSONRPC(t, strings.Join(h, ": "), status, body, http.StatusForbidden)
	}
	if starts := serverStarts(t, mark); len(starts) != 0 {
		t.Fatalf("refused requests started the server %d times", len(starts))
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	// A session, which a client of the stateless protocol would not open.
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	pid := callInt(t, cs, "pid")
	if err := cs.Close(); err != nil { // DELETE
		t.Errorf("close: %v", err)
	}
	if !waitExit(t, pid, 10*time.Second) {
		t.Errorf("the session's server %d outlived the client's DELETE", pid)
	}
	if starts := serverStarts(t, mark); len(starts) != 1 || starts[0] != pid {
		t.Errorf("server starts %v, want one, %d", starts, pid)
	}
	stop(t, cmd)
}

// bearer adds a token to every request of the SDK's client.
type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestMCPHTTPTokenRule: with tokens, a request without one or with a
// wrong one gets a 401 with a JSON-RPC error and starts nothing; with
// the right one any Host is served; SIGTERM ends the sessions still open
// and their servers, and exits 0.
func TestMCPHTTPTokenRule(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "starts")
	cmd, endpoint := startHTTP(t, []string{"REBOUND_TEST_MCP_TOKENS=tok-one,tok-two"},
		append([]string{"--token-env", "REBOUND_TEST_MCP_TOKENS"}, testServer(mark)...)...)
	for _, h := range [][]string{nil, {"Authorization", "Bearer tok-three"}, {"Authorization", "tok-one"}} {
		status, body := postInitialize(t, endpoint, h...)
		refusedAsJSONRPC(t, strings.Join(h, ": "), status, body, http.StatusUnauthorized)
	}
	if starts := serverStarts(t, mark); len(starts) != 0 {
		t.Fatalf("unauthorized requests started the server %d times", len(starts))
	}
	if status, body := postInitialize(t, endpoint, "Host", "mcp.example.com", "Authorization", "Bearer tok-two"); status != http.StatusOK {
		t.Errorf("with a token, for another Host: %d %s, want 200", status, body)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{"tok-one"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	pid := callInt(t, cs, "pid")
	stop(t, cmd)
	starts := serverStarts(t, mark)
	if len(starts) != 2 || starts[1] != pid {
		t.Errorf("server starts %v, want two, the second %d", starts, pid)
	}
	for _, p := range starts {
		if !waitExit(t, p, 10*time.Second) {
			t.Errorf("server %d outlived the command", p)
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
}

// TestMCPHTTPTokensAreNotInTheServersEnvironment: the variable --token-env
// names is not passed on to the server, whose tools (an environment echo,
// a shell) any client could use to read every client's token; the rest
// of the environment is.
func TestMCPHTTPTokensAreNotInTheServersEnvironment(t *testing.T) {
	_, endpoint := startHTTP(t, []string{"REBOUND_TEST_MCP_TOKENS=tok-one,tok-two", "REBOUND_TEST_KEPT=kept"},
		append([]string{"--token-env", "REBOUND_TEST_MCP_TOKENS"}, testServer("")...)...)
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: bearer{"tok-one"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for name, want := range map[string]string{"REBOUND_TEST_MCP_TOKENS": "", "REBOUND_TEST_KEPT": "kept"} {
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "env", Arguments: map[string]any{"name": name}})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; got != want {
			t.Errorf("the server's %s is %q, want %q", name, got, want)
		}
	}
}
