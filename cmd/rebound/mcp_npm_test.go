package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/internal/npmserver"
)

// children returns the pids of pid's children, which any of its threads
// may have started.
func children(t *testing.T, pid int) []int {
	t.Helper()
	files, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	if err != nil || len(files) == 0 {
		t.Fatalf("children of %d: %v", pid, err)
	}
	var pids []int
	for _, file := range files {
		data, _ := os.ReadFile(file)
		for _, f := range strings.Fields(string(data)) {
			n, _ := strconv.Atoi(f)
			pids = append(pids, n)
		}
	}
	return pids
}

// textOf returns what returns a tool result's text, failing t on an
// error.
func textOf(t *testing.T) func(*mcp.CallToolResult, error) string {
	return func(res *mcp.CallToolResult, err error) string {
		t.Helper()
		return text(t, res, err)
	}
}

func text(t *testing.T, res *mcp.CallToolResult, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("tool error: %s", b.String())
	}
	return b.String()
}

// TestMCPMemoryServerThroughCommand: the Go SDK's client, through
// "rebound mcp -- node server-memory" (the npm package, as a Claude Code
// user would run it), creates an entity; the server killed, its
// read-only read_graph is answered by the server started again, which
// reads the entity back from its file, the client none the wiser.
func TestMCPMemoryServerThroughCommand(t *testing.T) {
	server := npmserver.MemoryStdio(t, filepath.Join(t.TempDir(), "memory.jsonl"))
	cmd := mcpProcess(t, append([]string{"--name", "memory", "--"}, server.Args...)...)
	cmd.Env = append(server.Env, cmd.Env[len(cmd.Env)-1]) // the server's environment, and the command's arguments
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "create_entities", Arguments: map[string]any{
		"entities": []map[string]any{{"name": "rebound", "entityType": "project", "observations": []string{"survives crashes"}}},
	}}))
	kids := children(t, cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("rebound mcp has children %v, want the one server", kids)
	}
	syscall.Kill(kids[0], syscall.SIGKILL)
	if !waitExit(t, kids[0], 10*time.Second) {
		t.Fatal("the killed server did not exit")
	}
	graph := textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "read_graph", Arguments: map[string]any{}}))
	if !strings.Contains(graph, "survives crashes") {
		t.Errorf("read_graph after the restart: %s", graph)
	}
	if again := children(t, cmd.Process.Pid); len(again) != 1 || again[0] == kids[0] {
		t.Errorf("children after the kill %v, want one new server", again)
	}
}

// TestMCPEverythingOverHTTPUpstream: the Go SDK's client, over stdio
// through "rebound mcp --upstream" to the everything server's streamable
// HTTP mode, calls echo; the server restarted (every session lost), the
// next echo is answered all the same, on a session rebound opened again.
func TestMCPEverythingOverHTTPUpstream(t *testing.T) {
	srv := npmserver.EverythingHTTP(t)
	cmd := mcpProcess(t, "--upstream", srv.URL)
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	echo := func(msg string) string {
		return textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}}))
	}
	if got := echo("before"); !strings.Contains(got, "before") {
		t.Errorf("echo: %q", got)
	}
	srv.Restart()
	if got := echo("after"); !strings.Contains(got, "after") {
		t.Errorf("echo after the server restarted: %q", got)
	}
}

// TestMCPEverythingBehindHTTPFront: the Go SDK's client over streamable
// HTTP to "rebound mcp --addr", which runs the everything server over
// stdio: its tools listed and echo called, the server killed and echo
// answered by the next one, SIGTERM letting a call in flight finish and
// exiting 0 with the server gone.
func TestMCPEverythingBehindHTTPFront(t *testing.T) {
	server := npmserver.EverythingStdio(t)
	cmd := mcpProcess(t, append([]string{"--addr", "127.0.0.1:0", "--"}, server.Args...)...)
	cmd.Env = append(server.Env, cmd.Env[len(cmd.Env)-1])
	endpoint := startListening(t, cmd)
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools/list: %v, %v", tools, err)
	}
	echo := func(msg string) string {
		return textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}}))
	}
	if got := echo("before"); !strings.Contains(got, "before") {
		t.Errorf("echo: %q", got)
	}
	kids := children(t, cmd.Process.Pid)
	if len(kids) != 1 {
		t.Fatalf("rebound mcp has children %v, want the one server", kids)
	}
	syscall.Kill(kids[0], syscall.SIGKILL)
	if !waitExit(t, kids[0], 10*time.Second) {
		t.Fatal("the killed server did not exit")
	}
	if got := echo("after"); !strings.Contains(got, "after") {
		t.Errorf("echo after the server was killed: %q", got)
	}
	again := children(t, cmd.Process.Pid)
	finished := slowCall(t, endpoint)
	stop(t, cmd)
	if got := <-finished; !strings.Contains(got, "completed") {
		t.Errorf("a call in flight at SIGTERM: %q, want it to finish", got)
	}
	for _, pid := range again {
		if !waitExit(t, pid, 10*time.Second) {
			t.Errorf("server %d outlived the command", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
