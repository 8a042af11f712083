package reboundmcp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// fake is an MCP server on the official SDK, reached over an in-memory
// pipe, that a test can crash (its end of the pipe closed) mid-call, and
// that counts the runs of its tools.
type fake struct {
	t *testing.T

	mu       sync.Mutex
	starts   []time.Time
	pipes    []net.Conn     // the server's end, per start
	runs     map[string]int // runs of each tool
	onCall   func(ctx context.Context, f *fake, tool string, run int) (string, error)
	extra    func(start int) []string   // more tools on a start
	dialErr  func(start int) error      // refuse a start
	cancels  int                        // handlers whose context ended
	handlers map[string]mcp.ToolHandler // replace a tool's own
}

func newFake(t *testing.T) *fake { return &fake{t: t, runs: map[string]int{}} }

// tools are the fake's own: name → annotations.
var fakeTools = map[string]*mcp.ToolAnnotations{
	"read":  {ReadOnlyHint: true},
	"idem":  {IdempotentHint: true},
	"write": nil,
	"slow":  {ReadOnlyHint: true},
	"new":   {ReadOnlyHint: true},
}

func (f *fake) upstream() Upstream {
	return Upstream{name: "fake", dial: func(ctx context.Context, _ *Options) (mcp.Connection, error) {
		f.mu.Lock()
		f.starts = append(f.starts, time.Now())
		n := len(f.starts)
		f.mu.Unlock()
		if f.dialErr != nil {
			if err := f.dialErr(n); err != nil {
				return nil, err
			}
		}
		srv := mcp.NewServer(&mcp.Implementation{Name: "fake", Version: "1"}, nil)
		names := []string{"read", "idem", "write", "slow"}
		if f.extra != nil {
			names = append(names, f.extra(n)...)
		}
		for _, name := range names {
			srv.AddTool(&mcp.Tool{Name: name, Annotations: fakeTools[name], InputSchema: map[string]any{"type": "object"}}, f.handler(name))
		}
		serverEnd, clientEnd := net.Pipe()
		f.mu.Lock()
		f.pipes = append(f.pipes, serverEnd)
		f.mu.Unlock()
		if _, err := srv.Connect(ctx, &mcp.IOTransport{Reader: serverEnd, Writer: serverEnd}, nil); err != nil {
			return nil, err
		}
		return (&mcp.IOTransport{Reader: clientEnd, Writer: clientEnd}).Connect(ctx)
	}}
}

func (f *fake) handler(name string) mcp.ToolHandler {
	if h := f.handlers[name]; h != nil {
		return h
	}
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		f.mu.Lock()
		f.runs[name]++
		run := f.runs[name]
		on := f.onCall
		f.mu.Unlock()
		text := fmt.Sprintf("%s #%d", name, run)
		if on != nil {
			var err error
			if text, err = on(ctx, f, name, run); err != nil {
				return nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil
	}
}

// crash closes the pipe of the latest start, as if its process died.
func (f *fake) crash() {
	f.mu.Lock()
	p := f.pipes[len(f.pipes)-1]
	f.mu.Unlock()
	p.Close()
}

// crashMidCall crashes the server from inside a handler and waits for the
// handler's context to end.
func crashMidCall(ctx context.Context, f *fake) (string, error) {
	f.crash()
	<-ctx.Done()
	f.mu.Lock()
	f.cancels++
	f.mu.Unlock()
	return "", ctx.Err()
}

func (f *fake) runsOf(tool string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[tool]
}

func (f *fake) startTimes() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.starts...)
}

// logBuffer collects a Transport's JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// awaitStarts waits, a virtual millisecond at a time, for the n-th start.
func (f *fake) awaitStarts(n int) {
	for len(f.startTimes()) < n {
		time.Sleep(time.Millisecond)
	}
	synctest.Wait()
}

// requests returns the access lines (message request).
func (l *logBuffer) requests(t *testing.T) []map[string]any { return l.lines(t, "request") }

// lines returns the lines of one message.
func (l *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		var m map[string]any
		if line == "" {
			continue
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// connect connects an SDK client through a Transport to f. legacy picks
// the initialize handshake over the stateless protocol.
func connect(t *testing.T, f *fake, o Options, legacy bool, copts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, copts)
	var so *mcp.ClientSessionOptions
	if legacy {
		so = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}
	}
	cs, err := client.Connect(t.Context(), New(f.upstream(), o), so)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func callText(t *testing.T, cs *mcp.ClientSession, tool string) (string, error) {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	if err != nil {
		return "", err
	}
	if len(res.Content) == 0 {
		return "", fmt.Errorf("empty result")
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}
