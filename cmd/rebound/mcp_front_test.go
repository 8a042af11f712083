package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPHTTPAnswersHealthAndMetricsAndSurvivesSIGHUP: "rebound mcp
// --addr" answers the front's own paths as the proxy does (/healthz,
// /readyz, and /metrics with the calls it relayed), and SIGHUP re-reads
// its --config instead of stopping it: a session opened after it is
// served, and SIGTERM still exits 0.
func TestMCPHTTPAnswersHealthAndMetricsAndSurvivesSIGHUP(t *testing.T) {
	dir := t.TempDir()
	config := filepath.Join(dir, "tools.json")
	if err := os.WriteFile(config, []byte(`{"tools": {"pid": "read-only"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := mcpProcess(t, append([]string{"--addr", "127.0.0.1:0", "--config", config}, testServer("")...)...)
	logged := make(chan map[string]any, 64)
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() }) // after the command has been waited for
	cmd.Stderr = io.MultiWriter(cmd.Stderr, pw)
	go func() {
		defer close(logged)
		s := bufio.NewScanner(pr)
		for s.Scan() {
			var l map[string]any
			if json.Unmarshal(s.Bytes(), &l) == nil && strings.Contains(s.Text(), "config") {
				logged <- l
			}
		}
	}()
	endpoint := startListening(t, cmd)
	base := strings.TrimSuffix(endpoint, "/mcp")

	for path, want := range map[string]string{"/healthz": `{"status":"ok"}`, "/readyz": `{"status":"ready"}`} {
		if resp, body := get(t, base+path); resp.StatusCode != 200 || strings.TrimSpace(body) != want {
			t.Errorf("%s: %d %q, want 200 %s", path, resp.StatusCode, body, want)
		}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	callInt(t, cs, "pid")
	resp, body := get(t, base+"/metrics")
	if resp.StatusCode != 200 || !strings.Contains(body, "rebound_call_duration_seconds_count{") || !strings.Contains(body, `/pid"} 1`) {
		t.Errorf("/metrics: %d, want 200 with the call's series:\n%s", resp.StatusCode, body)
	}
	// And under the MCP conventions' name, once its access line is
	// written, which may come just after the answer.
	operation := `mcp_client_operation_duration_seconds_count{gen_ai_tool_name="pid",mcp_method_name="tools/call"`
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(body, operation) && time.Now().Before(deadline); {
		_, body = get(t, base+"/metrics")
	}
	if !strings.Contains(body, operation) {
		t.Errorf("/metrics has no %s:\n%s", operation, body)
	}
	cs.Close()

	cmd.Process.Signal(syscall.SIGHUP)
	select {
	case l := <-logged:
		if l["msg"] != "config loaded" {
			t.Errorf("after SIGHUP the log says %v, want config loaded", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no line about the config in the log after SIGHUP")
	}
	if resp, _ := get(t, base+"/healthz"); resp.StatusCode != 200 {
		t.Errorf("/healthz after SIGHUP: %d", resp.StatusCode)
	}
	cs, err = client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatalf("a session after SIGHUP: %v", err)
	}
	callInt(t, cs, "pid")
	cs.Close()
	stop(t, cmd)
}
