package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpServerArg, as the test binary's first argument, makes it an MCP
// server on stdio (the Go SDK's) instead of running the tests: the server
// "rebound mcp" wraps. An argument, not an environment variable, so that
// the command between the test and the server stays the command.
const mcpServerArg = "-rebound.test-mcp-server"

// testServer returns the arguments of "rebound mcp" that run the test
// server; mark, if not empty, names a file the server appends its pid to
// when it starts, so that a test can tell whether it ever ran.
func testServer(mark string) []string {
	return []string{"--", os.Args[0], mcpServerArg, mark}
}

// runTestMCPServer serves, until its stdin closes, the tools "pid" (its
// process id; read-only) and "spawn" (starts a long sleep in its process
// group and returns the sleeper's pid: what the server leaves behind if
// only it is killed).
func runTestMCPServer(args []string) {
	if len(args) > 0 && args[0] != "" {
		mark := args[0]
		f, err := os.OpenFile(mark, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
		if err == nil {
			f.WriteString(strconv.Itoa(os.Getpid()) + "\n")
			f.Close()
		}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	object := json.RawMessage(`{"type":"object"}`)
	text := func(n int) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: strconv.Itoa(n)}}}
	}
	s.AddTool(&mcp.Tool{Name: "pid", InputSchema: object, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return text(os.Getpid()), nil
		})
	s.AddTool(&mcp.Tool{Name: "spawn", InputSchema: object},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			sleeper := exec.Command("sleep", "600")
			if err := sleeper.Start(); err != nil {
				return nil, err
			}
			go sleeper.Wait()
			return text(sleeper.Process.Pid), nil
		})
	s.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}
