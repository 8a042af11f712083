package mcprun

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/internal/npmserver"
	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// TestStatelessTenantCannotReachAnotherTenantsTask: stateless clients of
// two tenants share one upstream connection, so one server session: the
// tasks one creates (a task-augmented tools/call) must not be listed,
// read or cancelled by the other, least of all by a tenant not given the
// tool that made the task. Here tenant a runs simulate-research-query as
// a task; tenant b, given echo alone, asks tasks/list and tasks/cancel.
func TestStatelessTenantCannotReachAnotherTenantsTask(t *testing.T) {
	cmd := npmserver.EverythingStdio(t)
	h := newHandler(t.Context(), func() *reboundmcp.Transport {
		return reboundmcp.New(reboundmcp.Command(cmd), reboundmcp.Options{})
	}, 4, 0)
	h.caller = func(r *http.Request) proxy.MCPCaller {
		if r.Header.Get("X-Tenant") == "a" {
			return proxy.MCPCaller{Tenant: "a", Holder: "a", Tools: []string{"simulate-research-query"}}
		}
		return proxy.MCPCaller{Tenant: "b", Holder: "b", Tools: []string{"echo"}}
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	defer h.Close()
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}`
	as := func(tenant, body string) (int, string) {
		req, _ := http.NewRequestWithContext(context.Background(), "POST", srv.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
		req.Header.Set("X-Tenant", tenant)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	status, body := as("a", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"simulate-research-query","arguments":{"topic":"a's secret topic"},"task":{"ttl":60000},`+meta+`}}`)
	t.Logf("a's task-augmented call: %d %s", status, body)
	var created struct {
		Result struct {
			Task struct {
				TaskID string `json:"taskId"`
			} `json:"task"`
		} `json:"result"`
	}
	json.Unmarshal([]byte(body), &created)
	if created.Result.Task.TaskID == "" {
		t.Fatalf("no task was created (the server-everything pinned runs task-augmented calls): %d %s", status, body)
	}
	id := created.Result.Task.TaskID
	_, list := as("b", `{"jsonrpc":"2.0","id":2,"method":"tasks/list","params":{`+meta+`}}`)
	if strings.Contains(list, id) {
		t.Errorf("tenant b's tasks/list shows a's task: %s", list)
	}
	_, get := as("b", `{"jsonrpc":"2.0","id":3,"method":"tasks/get","params":{"taskId":"`+id+`",`+meta+`}}`)
	if strings.Contains(get, `"result"`) {
		t.Errorf("tenant b's tasks/get of a's task: %s", get)
	}
	_, cancel := as("b", `{"jsonrpc":"2.0","id":4,"method":"tasks/cancel","params":{"taskId":"`+id+`",`+meta+`}}`)
	if strings.Contains(cancel, `"result"`) {
		t.Errorf("tenant b's tasks/cancel of a's task: %s", cancel)
	}
	_, after := as("a", `{"jsonrpc":"2.0","id":5,"method":"tasks/get","params":{"taskId":"`+id+`",`+meta+`}}`)
	t.Logf("a's task after b's cancel: %s", after)
	// Another task of a's, run to its end: b reads its result, the
	// output of a tool b was not given.
	_, body = as("a", `{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"simulate-research-query","arguments":{"topic":"a's second secret"},"task":{"ttl":60000},`+meta+`}}`)
	json.Unmarshal([]byte(body), &created)
	_, result := as("b", `{"jsonrpc":"2.0","id":7,"method":"tasks/result","params":{"taskId":"`+created.Result.Task.TaskID+`",`+meta+`}}`)
	if strings.Contains(result, "second secret") {
		t.Errorf("tenant b's tasks/result of a's task: %.300s", result)
	}
}
