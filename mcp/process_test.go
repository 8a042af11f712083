package reboundmcp

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
)

// connectChild connects an SDK client through a Transport to the child.
func connectChild(t *testing.T, up Upstream, o Options) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), New(up, o), nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func TestStdioSideEffectingCallInFlightWhenTheProcessDiesRunsOnceAndTheCallerIsTold(t *testing.T) {
	cmd, runs := childCommand(t, "crash-write")
	var logs logBuffer
	cs := connectChild(t, Command(cmd), Options{Logger: logs.logger()})
	if _, err := callText(t, cs, "read"); err != nil {
		t.Fatal(err)
	}
	_, err := callText(t, cs, "write")
	if err == nil || !strings.Contains(err.Error(), `tool "write"`) || !strings.Contains(err.Error(), "may have taken effect") {
		t.Fatalf("err = %v; want one naming the tool and saying it may have taken effect", err)
	}
	if got, err := callText(t, cs, "read"); err != nil || got != "read 2" {
		t.Fatalf("the call after the crash: %q, %v; want read 2 from the restarted server", got, err)
	}
	if n := countRuns(runs, "write"); n != 1 {
		t.Errorf("write ran %d times, want 1", n)
	}
	reqs := logs.requests(t)
	var write map[string]any
	for _, r := range reqs {
		if r["tool"] == "write" {
			write = r
		}
	}
	if write["outcome"] != "may_have_run" || write["attempts"] != 1.0 {
		t.Errorf("the write's log line: %v", write)
	}
	// The access line of rebound proxy's schema: its kind, one level, the
	// latency a number of milliseconds.
	if _, ms := write["latency_ms"].(float64); write["kind"] != "mcp" || write["level"] != "INFO" || !ms || write["duration"] != nil {
		t.Errorf("the write's log line is not of the access line's schema: %v", write)
	}
}

func TestStdioReadOnlyCallsThroughRepeatedCrashesAreNoneLost(t *testing.T) {
	cmd, runs := childCommand(t, "crash-read-3")
	var logs logBuffer
	// Restarts come quicker than by default, and the respawn breaker
	// (10 crashes in 30 s) is off: this is about calls, not the schedule.
	o := Options{Logger: logs.logger(), RestartMin: time.Millisecond, RestartMax: 10 * time.Millisecond, CrashLimit: -1}
	o.Policy.BaseDelay = rebound.NoDelay
	cs := connectChild(t, Command(cmd), o)
	const calls = 30
	var slowest time.Duration
	for i := range calls {
		start := time.Now()
		if _, err := callText(t, cs, "read"); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		slowest = max(slowest, time.Since(start))
	}
	// Every third run dies mid-call and is run again, on a new process.
	crashed := countRuns(runs, "read") - calls
	restarted := 0
	for _, r := range logs.requests(t) {
		if r["restarted"] == true {
			restarted++
		}
	}
	t.Logf("%d calls, %d crashes mid-call, %d answered by a restarted server; slowest call %v", calls, crashed, restarted, slowest)
	if crashed < calls/3 || restarted != crashed {
		t.Errorf("%d crashes and %d calls answered after a restart: want about %d of each", crashed, restarted, calls/2)
	}
	if slowest >= defaultDownWait {
		t.Errorf("the slowest call took %v, past the down-wait", slowest)
	}
}

func TestCloseEndsTheChildsWholeProcessGroup(t *testing.T) {
	cmd, _ := childCommand(t, "serve")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = w // the child and its grandchild hold it open while they live
	cs := connectChild(t, Command(cmd), Options{})
	w.Close()
	pid, err := callText(t, cs, "spawn")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/" + pid); err != nil {
		t.Fatalf("the grandchild %s is not running before Close: %v", pid, err)
	}
	cs.Close()
	// EOF comes only once every process holding the pipe has exited (or
	// is exiting: its files are closed before it is reaped), and the
	// grandchild closes it no other way.
	if _, err := io.Copy(io.Discard, r); err != nil {
		t.Fatal(err)
	}
}

func TestStdioCallWithoutAnswerOrProgressIsCancelledAfterTheIdleTimeout(t *testing.T) {
	cmd, runs := childCommand(t, "serve")
	cs := connectChild(t, Command(cmd), Options{IdleTimeout: time.Second})
	_, err := callText(t, cs, "hang")
	if err == nil || !strings.Contains(err.Error(), "no answer and no progress") {
		t.Fatalf("err = %v; want the idle timeout's", err)
	}
	// The server is told: its handler ends, and says so.
	awaitRun(t, runs, "cancelled", "the server was never told to cancel the call")
	if got, err := callText(t, cs, "read"); err != nil || got != "read 1" {
		t.Errorf("the next call: %q, %v", got, err)
	}
}

func TestStdioCallTheClientCancelsIsCancelledAtTheServer(t *testing.T) {
	cmd, runs := childCommand(t, "serve")
	cs := connectChild(t, Command(cmd), Options{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}})
		done <- err
	}()
	awaitRun(t, runs, "hang", "the call never reached the server")
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	awaitRun(t, runs, "cancelled", "the server was never told the client cancelled the call")
}

// awaitRun waits for the child's log to hold a run of tool, for at most
// ten seconds (a real process, in real time), failing with why.
func awaitRun(t *testing.T, runs, tool, why string) {
	t.Helper()
	limit := time.After(10 * time.Second)
	for countRuns(runs, tool) == 0 {
		select {
		case <-limit:
			t.Fatal(why)
		case <-time.After(time.Millisecond):
		}
	}
}

// TestStdioServerPrintingNonJSONLinesIsNotKilled: a server that writes
// lines other than JSON-RPC to its stdout (a banner, a stray log line, as
// servers made for clients that skip such lines do) is not taken for dead
// and restarted until the breaker opens: the lines are skipped, and
// its calls are answered by its first start.
func TestStdioServerPrintingNonJSONLinesIsNotKilled(t *testing.T) {
	child, runs := childCommand(t, "plain")
	// A banner, a long line and a log line, then the server, whose pid
	// stays the shell's.
	script := `echo "Knowledge Graph MCP Server running on stdio"; head -c 100000 /dev/zero | tr '\0' x; echo; echo "  [info] ready"; exec "$0"`
	cmd := exec.Command("sh", "-c", script, child.Path)
	cmd.Env = child.Env
	var logs logBuffer
	cs := connectChild(t, Command(cmd), Options{Logger: logs.logger()})
	for want := 1; want <= 2; want++ {
		got, err := callText(t, cs, "read")
		if err != nil || got != fmt.Sprintf("read %d", want) {
			t.Fatalf("call %d: %q, %v", want, got, err)
		}
	}
	if n := countRuns(runs, "read"); n != 2 {
		t.Errorf("read ran %d times, want 2", n)
	}
	if restarts := logs.lines(t, "mcp.restart"); len(restarts) != 0 {
		t.Errorf("the server was restarted %d times: %v", len(restarts), restarts)
	}
}

// TestStdioServerThatStopsReadingDoesNotHangCalls: a server that answers
// initialize and then never reads its stdin again fills the pipe; a call
// whose request does not fit must not wait on the write forever (nor the
// calls queued behind it): a write that makes no progress for the idle
// timeout ends the server, and the calls get an error.
func TestStdioServerThatStopsReadingDoesNotHangCalls(t *testing.T) {
	deaf := `read line; echo '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"deaf","version":"1"}}}'; exec sleep 600`
	o := Options{IdleTimeout: 200 * time.Millisecond, RestartMin: time.Millisecond, RestartMax: 10 * time.Millisecond}
	conn, err := New(Command(exec.Command("sh", "-c", deaf)), o).Connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rawRequest(t, conn, 1, "initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`)
	if r := readResponse(t, conn); r.Error != nil {
		t.Fatalf("initialize: %v", r.Error)
	}
	big := strings.Repeat("x", 1<<20) // more than any pipe holds
	rawRequest(t, conn, 2, "tools/call", `{"name":"t","arguments":{"a":"`+big+`"}}`)
	rawRequest(t, conn, 3, "ping", `{}`)
	answers := make(chan *jsonrpc.Response, 2)
	go func() {
		for len(answers) < 2 {
			msg, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			if r, ok := msg.(*jsonrpc.Response); ok {
				answers <- r
			}
		}
	}()
	for range 2 {
		select {
		case r := <-answers:
			if r.Error == nil {
				t.Errorf("request %v: answered without error by a server that reads nothing", r.ID.Raw())
			}
			t.Logf("request %v: %v", r.ID.Raw(), r.Error)
		case <-time.After(time.Minute): // far past the idle timeouts of every attempt
			t.Fatal("the calls to a server that stopped reading hang")
		}
	}
}

// TestStdioServerPrintingJSONThatIsNotJSONRPCIsNotKilled: a server that
// logs JSON objects to its stdout ({"level":"info",...}), values the SDK
// reads but cannot take as messages, is not taken for dead either: the
// values are skipped, and its calls are answered by its first start.
func TestStdioServerPrintingJSONThatIsNotJSONRPCIsNotKilled(t *testing.T) {
	child, runs := childCommand(t, "plain")
	script := `echo '{"level":"info","msg":"server started"}'; echo '[{"not":"a message"}]'; exec "$0"`
	cmd := exec.Command("sh", "-c", script, child.Path)
	cmd.Env = child.Env
	var logs logBuffer
	cs := connectChild(t, Command(cmd), Options{Logger: logs.logger()})
	if got, err := callText(t, cs, "read"); err != nil || got != "read 1" {
		t.Fatalf("%q, %v", got, err)
	}
	if n := countRuns(runs, "read"); n != 1 {
		t.Errorf("read ran %d times, want 1", n)
	}
	if restarts := logs.lines(t, "mcp.restart"); len(restarts) != 0 {
		t.Errorf("the server was restarted %d times: %v", len(restarts), restarts)
	}
}
