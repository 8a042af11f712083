package chaosmcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The tools' names.
const (
	ToolLookup = "lookup" // read-only: the value of a key
	ToolSet    = "set"    // idempotent: sets a key's value
	ToolAppend = "append" // side-effecting: appends to a key's value
)

type lookupArgs struct {
	Key string `json:"key" jsonschema:"the key to read"`
}

type writeArgs struct {
	Key   string `json:"key" jsonschema:"the key to write"`
	Value string `json:"value" jsonschema:"the value to set or append"`
}

// addTools adds the three tools to srv; their calls end when lost does.
func (s *Server) addTools(srv *mcp.Server, lost context.Context) {
	no, yes := false, true
	mcp.AddTool(srv, &mcp.Tool{
		Name:        ToolLookup,
		Description: "Returns the value of a key (empty if never set).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, DestructiveHint: &no, OpenWorldHint: &no},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in lookupArgs) (*mcp.CallToolResult, any, error) {
		return s.call(ctx, lost, req, ToolLookup, in, func() string { return s.values[in.Key] })
	})
	mcp.AddTool(srv, &mcp.Tool{
		Name:        ToolSet,
		Description: "Sets the value of a key, replacing what it held.",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: &yes, OpenWorldHint: &no},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
		return s.call(ctx, lost, req, ToolSet, in, func() string { s.values[in.Key] = in.Value; return in.Value })
	})
	mcp.AddTool(srv, &mcp.Tool{
		Name:        ToolAppend,
		Description: "Appends to the value of a key and returns the new value.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &no},
	}, func(ctx context.Context, req *mcp.CallToolRequest, in writeArgs) (*mcp.CallToolResult, any, error) {
		return s.call(ctx, lost, req, ToolAppend, in, func() string { s.values[in.Key] += in.Value; return s.values[in.Key] })
	})
}

// call is every tool's handler: it draws the call's fault, waits out a
// slow delay, runs the tool (run, under s.mu, returns its answer),
// counts the run and then crashes or answers.
func (s *Server) call(ctx, lost context.Context, req *mcp.CallToolRequest, tool string, args any, run func() string) (*mcp.CallToolResult, any, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(lost, cancel)()
	f := s.draw()
	if f == faultHang {
		<-ctx.Done()
		return nil, nil, ctx.Err()
	}
	if err := s.wait(ctx, req); err != nil {
		return nil, nil, err
	}
	if f == faultError {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "chaos: injected tool error; " + tool + " did not run"}}}, nil, nil
	}
	s.mu.Lock()
	answer := run()
	s.runs++
	crash := f == faultCrash || s.cfg.CrashAfter > 0 && s.runs%s.cfg.CrashAfter == 0
	err := s.count(tool, args)
	s.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	if crash {
		os.Exit(CrashExitCode)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: answer}}}, nil, nil
}

// A countLine is a line of the count file.
type countLine struct {
	Tool string `json:"tool"`
	Args any    `json:"args"`
}

// count counts a run of tool, in the count file if there is one, synced
// before the call goes on. s.mu is held.
func (s *Server) count(tool string, args any) error {
	s.counts[tool]++
	if s.counter == nil {
		return nil
	}
	line, err := json.Marshal(countLine{tool, args})
	if err != nil {
		return err
	}
	if _, err := s.counter.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("chaosmcp: count file: %w", err)
	}
	if err := s.counter.Sync(); err != nil {
		return fmt.Errorf("chaosmcp: count file: %w", err)
	}
	return nil
}

// ReadCounts reads a count file (see Config.CountFile) and returns the
// runs it records by tool. A last line cut short, by a process killed
// while writing it, is not counted: its call had not answered.
func ReadCounts(path string) (map[string]int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	counts := map[string]int{}
	r := bufio.NewReader(f)
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return counts, nil // a line without its newline was cut short
		}
		if err != nil {
			return nil, err
		}
		var c countLine
		if err := json.Unmarshal(line, &c); err != nil || c.Tool == "" {
			return nil, fmt.Errorf("chaosmcp: %s:%d: not a count line", path, n)
		}
		counts[c.Tool]++
	}
}
