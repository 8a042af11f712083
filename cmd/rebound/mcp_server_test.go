package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

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

// note appends a line to the mark file, if there is one.
func note(mark, line string) {
	if mark == "" {
		return
	}
	if f, err := os.OpenFile(mark, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
		f.WriteString(line + "\n")
		f.Close()
	}
}

// runTestMCPServer serves, until its stdin closes, the tools "pid" (its
// process id; read-only), "spawn" (starts a long sleep in its process
// group and returns the sleeper's pid: what the server leaves behind if
// only it is killed), "exit" (side-effecting: notes "exit" in the mark
// file and exits while the call runs), "first_start_dies" (read-only:
// the server's first start exits while the call runs, a later one answers
// its pid) and "env" (read-only: the value of the environment variable
// its argument "name" names, as servers that echo their environment do).
// With a second argument "linger", it does not exit when its stdin
// closes, as some servers do not.
func runTestMCPServer(args []string) {
	mark := ""
	if len(args) > 0 {
		mark = args[0]
	}
	linger := len(args) > 1 && args[1] == "linger"
	note(mark, strconv.Itoa(os.Getpid()))
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
	s.AddTool(&mcp.Tool{Name: "exit", InputSchema: object},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			note(mark, "exit")
			os.Exit(3)
			return nil, nil
		})
	s.AddTool(&mcp.Tool{Name: "first_start_dies", InputSchema: object, Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			if data, _ := os.ReadFile(mark); strings.Count(string(data), "\n") == 1 {
				os.Exit(3)
			}
			return text(os.Getpid()), nil
		})
	s.AddTool(&mcp.Tool{Name: "env", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}}}`), Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ Name string }
			json.Unmarshal(req.Params.Arguments, &args)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: os.Getenv(args.Name)}}}, nil
		})
	s.Run(context.Background(), &mcp.StdioTransport{})
	if linger {
		time.Sleep(time.Hour)
	}
	os.Exit(0)
}
