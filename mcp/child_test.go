package reboundmcp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The test binary is also the stdio MCP server the crash tests run as a
// child process: with childMode set it serves on its standard input and
// output instead of running the tests. Every tool run is written to the
// file childLog names, a line each, before the tool answers, so that the
// tests count executions across the children's lives.
const (
	childMode = "REBOUNDMCP_TEST_CHILD"
	childLog  = "REBOUNDMCP_TEST_LOG"
	childArgv = "REBOUNDMCP_TEST_ARGV" // relay-kill: the server's command line, JSON
	childTool = "REBOUNDMCP_TEST_TOOL" // relay-kill: the tool whose call kills
)

func TestMain(m *testing.M) {
	switch os.Getenv(childMode) {
	case "":
		os.Exit(m.Run())
	case "relay-kill":
		relayKill()
	case "grandchild":
		time.Sleep(time.Hour) // lives until its process group is killed
		os.Exit(0)
	default:
		serveChild(os.Getenv(childMode))
	}
}

// serveChild serves the tools read (read-only), write (no annotations),
// hang (read-only, answers nothing until cancelled) and spawn (starts a grandchild, says its PID, and hangs). mode says when
// to die mid-call: "crash-write" on every write, "crash-read-3" on every
// third read of all the children's lives.
func serveChild(mode string) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "child", Version: "1"}, nil)
	schema := map[string]any{"type": "object"}
	srv.AddTool(&mcp.Tool{Name: "read", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}, InputSchema: schema},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := record("read")
			if mode == "crash-read-3" && n%3 == 0 {
				os.Exit(3)
			}
			return text(fmt.Sprintf("read %d", n)), nil
		})
	srv.AddTool(&mcp.Tool{Name: "write", InputSchema: schema},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			n := record("write")
			if mode == "crash-write" {
				os.Exit(3)
			}
			return text(fmt.Sprintf("write %d", n)), nil
		})
	srv.AddTool(&mcp.Tool{Name: "hang", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}, InputSchema: schema},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			record("hang")
			<-ctx.Done() // until cancelled
			record("cancelled")
			return nil, ctx.Err()
		})
	srv.AddTool(&mcp.Tool{Name: "spawn", InputSchema: schema},
		func(ctx context.Context, _ *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), childMode+"=grandchild")
			cmd.Stderr = os.Stderr // holds the test's pipe open while it lives
			if err := cmd.Start(); err != nil {
				return nil, err
			}
			return text(fmt.Sprint(cmd.Process.Pid)), nil
		})
	if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// record appends tool's line to the log and returns how many lines for
// tool it holds.
func record(tool string) int {
	path := os.Getenv(childLog)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		panic(err)
	}
	f.WriteString(tool + "\n")
	f.Close()
	return countRuns(path, tool)
}

func countRuns(path, tool string) int {
	b, _ := os.ReadFile(path)
	return strings.Count(string(b), tool+"\n")
}

// childCommand is the test binary as a stdio server in mode, logging its
// runs to a file of the test's.
func childCommand(t testing.TB, mode string) (*exec.Cmd, string) {
	log := t.TempDir() + "/runs"
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), childMode+"="+mode, childLog+"="+log)
	return cmd, log
}
