package mcprun

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/proxy"
)

// TestARefusedToolCallHasAnAccessLine: a stateless call of a tool the
// caller was not given, answered by the Handler and never sent, has its
// access line in the relay's schema: kind mcp, the server, the tool (cut
// to maxLoggedTool), no attempt, outcome tool_not_given, the tenant;
// never the call's arguments.
func TestARefusedToolCallHasAnAccessLine(t *testing.T) {
	var logs bytes.Buffer
	h := newHandler(t.Context(), nil, 1, 0) // no upstream may start: nil would panic
	defer h.Close()
	h.logger, h.name = slog.New(slog.NewJSONHandler(&logs, nil)), "srv"
	long := strings.Repeat("x", 200)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + long + `","arguments":{"secret":"s3cr3t"},` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`
	r := httptest.NewRequest("POST", Path, strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	r.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	w := httptest.NewRecorder()
	h.serve(w, r, []byte(body), proxy.MCPCaller{Tenant: "a", Tools: []string{"echo"}})
	if !strings.Contains(w.Body.String(), "-32602") {
		t.Fatalf("answer %d %s, want a -32602 refusal", w.Code, w.Body)
	}
	var line map[string]any
	if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
		t.Fatalf("log %q: %v", logs.String(), err)
	}
	for k, want := range map[string]any{"msg": "request", "kind": "mcp", "server": "srv", "method": "tools/call",
		"tool": long[:maxLoggedTool], "attempts": 0.0, "outcome": "tool_not_given", "tenant": "a"} {
		if line[k] != want {
			t.Errorf("%s: %v, want %v (line %s)", k, line[k], want, logs.String())
		}
	}
	if _, ok := line["latency_ms"].(float64); !ok || strings.Contains(logs.String(), "s3cr3t") {
		t.Errorf("line %s: want latency_ms, and no argument", logs.String())
	}
}
