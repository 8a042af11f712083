package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/mcp/chaosmcp"
)

// chaosServerArg, as the test binary's first argument, makes it the
// chaosmcp server on stdio, its runs counted in the file that follows and
// crashing after every CrashAfter-th call, the number after that.
const chaosServerArg = "-rebound.test-chaosmcp"

func runChaosMCPServer(args []string) {
	crashAfter, _ := strconv.Atoi(args[1])
	srv, err := chaosmcp.New(chaosmcp.Config{CountFile: args[0], CrashAfter: crashAfter})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	srv.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}

// TestMCPChaosServerCrashesThroughCommand: the Go SDK's client through
// "rebound mcp" to chaosmcp over stdio, which crashes after every second
// call it has run: the read-only and idempotent calls the crashes cut
// short are sent again and answered, the caller none the wiser; the
// side-effecting call the crash cuts short ran exactly once, and the
// caller is told it may have taken effect.
func TestMCPChaosServerCrashesThroughCommand(t *testing.T) {
	counts := filepath.Join(t.TempDir(), "counts")
	cmd := mcpProcess(t, "--name", "chaos", "--", os.Args[0], chaosServerArg, counts, "2")
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(tool string, args map[string]any) (*mcp.CallToolResult, error) {
		return cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	}
	// Each server runs two calls: the second crashes it after running.
	textOf(t)(call(chaosmcp.ToolLookup, map[string]any{"key": "k"}))             // 1st server, call 1
	textOf(t)(call(chaosmcp.ToolSet, map[string]any{"key": "k", "value": "v"}))  // call 2 crashes; resent: 2nd server, call 1
	textOf(t)(call(chaosmcp.ToolLookup, map[string]any{"key": "k"}))             // call 2 crashes; resent: 3rd server, call 1
	_, err = call(chaosmcp.ToolAppend, map[string]any{"key": "k", "value": "x"}) // call 2 crashes: not resent
	want := `MCP server chaos died while tool "append" ran: the call may have taken effect, and was not sent again`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("append cut short: %v, want an error with %q", err, want)
	}
	textOf(t)(call(chaosmcp.ToolLookup, map[string]any{"key": "k"})) // 4th server, call 1
	got, err := chaosmcp.ReadCounts(counts)
	if err != nil {
		t.Fatal(err)
	}
	if wantRuns := map[string]int{"lookup": 4, "set": 2, "append": 1}; !maps.Equal(got, wantRuns) {
		t.Errorf("runs %v, want %v", got, wantRuns)
	}
}

// TestMCPChaosServerLosesSessionsThroughUpstream: the Go SDK's client
// through "rebound mcp --upstream" to chaosmcp over streamable HTTP, which
// forgets every session at every second call: each call, side-effecting
// ones too, is answered and runs exactly once, since a request refused for
// its session never ran.
func TestMCPChaosServerLosesSessionsThroughUpstream(t *testing.T) {
	srv, err := chaosmcp.New(chaosmcp.Config{LoseSessionsEvery: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	up := httptest.NewServer(srv)
	defer up.Close()
	cmd := mcpProcess(t, "--upstream", up.URL+"/mcp")
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	const calls = 6
	var value string
	for i := range calls {
		value = textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: chaosmcp.ToolAppend, Arguments: map[string]any{"key": "k", "value": strconv.Itoa(i)}}))
	}
	if value != "012345" {
		t.Errorf("the value after %d appends is %q, want 012345", calls, value)
	}
	if runs := srv.Counts()[chaosmcp.ToolAppend]; runs != calls {
		t.Errorf("append ran %d times for %d calls", runs, calls)
	}
}

// TestMCPErrorAnswerThroughUpstreamIsPassedOnNotResent: the Go SDK's
// client through "rebound mcp --upstream" to a server whose
// side-effecting tool acts, then answers with a JSON-RPC error: -32001
// (the TypeScript SDK's request timeout as well as its "Session not
// found"), or any error that speaks of a session. The caller gets the
// error as it came, and the tool acted once.
func TestMCPErrorAnswerThroughUpstreamIsPassedOnNotResent(t *testing.T) {
	var runs atomic.Int32
	var answer atomic.Pointer[jsonrpc.Error]
	server := mcp.NewServer(&mcp.Implementation{Name: "up", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "charge", InputSchema: map[string]any{"type": "object"}}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		runs.Add(1)
		return nil, answer.Load()
	})
	up := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	defer up.Close()
	cmd := mcpProcess(t, "--upstream", up.URL+"/mcp")
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for i, we := range []*jsonrpc.Error{
		{Code: -32001, Message: "Request timed out"},
		{Code: -32001, Message: "Session not found"},
		{Code: -32000, Message: "Bad Request: No valid session ID provided"},
	} {
		answer.Store(we)
		_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "charge", Arguments: map[string]any{}})
		var got *jsonrpc.Error
		if !errors.As(err, &got) || got.Code != we.Code || got.Message != we.Message {
			t.Errorf("charge answered %d %q: the caller got %v, want it as it came", we.Code, we.Message, err)
		}
		if n := runs.Load(); n != int32(i+1) {
			t.Fatalf("charge acted %d times for %d calls", n, i+1)
		}
	}
}
