package reboundmcp

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound/internal/npmserver"
)

func TestMemoryServerKilledMidCall(t *testing.T) {
	t.Run("create_entities, not idempotent: run once, the caller told", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "memory.jsonl")
		var logs logBuffer
		cs := connectChild(t, Command(killingRelay(t, npmserver.MemoryStdio(t, file), "create_entities")), Options{Logger: logs.logger()})
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "create_entities", Arguments: map[string]any{
			"entities": []map[string]any{{"name": "rebound", "entityType": "project", "observations": []string{"retries"}}},
		}})
		if err == nil || !strings.Contains(err.Error(), `tool "create_entities"`) || !strings.Contains(err.Error(), "may have taken effect") {
			t.Fatalf("err = %v; want one naming create_entities and saying it may have taken effect", err)
		}
		graph := readGraph(t, cs)
		if n := strings.Count(graph, `"name":"rebound"`); n != 1 {
			t.Errorf("the graph holds the entity %d times, want 1: %s", n, graph)
		}
		t.Logf("%s", logs.String())
	})
	t.Run("read_graph, read-only: resent, answered", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "memory.jsonl")
		var logs logBuffer
		cs := connectChild(t, Command(killingRelay(t, npmserver.MemoryStdio(t, file), "read_graph")), Options{Logger: logs.logger()})
		graph := readGraph(t, cs)
		if !strings.Contains(graph, "entities") {
			t.Errorf("graph %s", graph)
		}
		reqs := logs.requests(t)
		if last := reqs[len(reqs)-1]; last["tool"] != "read_graph" || last["attempts"] != 2.0 || last["restarted"] != true {
			t.Errorf("the read_graph's log line: %v", last)
		}
	})
}

func readGraph(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_graph", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("read_graph: %v", err)
	}
	b, _ := json.Marshal(res)
	return strings.ReplaceAll(string(b), `\"`, `"`)
}

func TestEverythingServerOverStdioKilledDuringALongReadOnlyOperation(t *testing.T) {
	var logs logBuffer
	cs := connectChild(t, Command(killingRelay(t, npmserver.EverythingStdio(t), "trigger-long-running-operation!")), Options{Logger: logs.logger()})
	params := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 1, "steps": 2}}
	params.SetProgressToken("op")
	res, err := cs.CallTool(t.Context(), params)
	if err != nil || res.IsError {
		t.Fatalf("res %v, err %v", res, err)
	}
	reqs := logs.requests(t)
	if last := reqs[len(reqs)-1]; last["attempts"] != 2.0 || last["restarted"] != true || last["outcome"] != "ok" {
		t.Errorf("the call's log line: %v", last)
	}
}

func TestEverythingServerOverHTTPRestartedLosesNoCall(t *testing.T) {
	srv := npmserver.EverythingHTTP(t)
	var logs logBuffer
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), New(HTTP(srv.URL, nil), Options{Logger: logs.logger()}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	defer func() { t.Logf("%s", logs.String()) }()
	echo := func(msg string) {
		t.Helper()
		res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}})
		if err != nil || res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, msg) {
			t.Fatalf("echo %q: %v, %v", msg, res, err)
		}
	}
	echo("before")
	srv.Restart()
	echo("after the restart")
	// A side-effecting tool after another restart: the server refuses it
	// for its session, so it never ran, and is sent again.
	srv.Restart()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "toggle-simulated-logging", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("toggle-simulated-logging after a restart: %v, %v", res, err)
	}
}
