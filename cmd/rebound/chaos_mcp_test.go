package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound/cmd/rebound/internal/chaosrun"
	"github.com/rebound-go/rebound/mcp/chaosmcp"
)

func TestRunChaosMCPUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string // in the stderr line
	}{
		{[]string{"--crash-after", "3"}, "--crash-after applies to --mcp only"},
		{[]string{"--addr", "127.0.0.1:0", "--count-file", "f"}, "--count-file applies to --mcp only"},
		{[]string{"--mcp", "--mode", "ok"}, "--mode does not apply to --mcp"},
		{[]string{"--mcp", "--fail-rate", "0.5"}, "--fail-rate does not apply to --mcp"},
		{[]string{"--mcp", "--crash-rate", "1.5"}, "--crash-rate 1.5: want a probability from 0 to 1"},
		{[]string{"--mcp", "--hang-rate", "NaN"}, "--hang-rate NaN: want a probability from 0 to 1"},
		{[]string{"--mcp", "--error-rate", "-Inf"}, "--error-rate -Inf: want a probability from 0 to 1"},
		{[]string{"--mcp", "--crash-rate", "0.6", "--hang-rate", "0.3", "--error-rate", "0.2"}, "--crash-rate, --hang-rate and --error-rate add up to 1.1, more than 1"},
		{[]string{"--mcp", "--crash-after", "-1"}, "--crash-after -1: want a number of calls, 0 for never"},
		{[]string{"--mcp", "--crash-after", "99999999999999999999"}, `invalid value "99999999999999999999" for flag -crash-after`},
		{[]string{"--mcp", "--lose-sessions-every", "-5", "--addr", "127.0.0.1:0"}, "--lose-sessions-every -5: want a number of calls"},
		{[]string{"--mcp", "--lose-sessions-every", "2"}, "--lose-sessions-every needs --addr: over stdio there are no sessions"},
		{[]string{"--mcp", "--progress"}, "--progress needs --slow"},
		{[]string{"--mcp", "--slow", "0s"}, "--slow 0s is not a positive duration"},
		{[]string{"--mcp", "--slow", "-1s"}, "--slow -1s is not a positive duration"},
		{[]string{"--mcp", "--count-file", ""}, "--count-file is empty"},
		{[]string{"--mcp", "--addr", "nonsense"}, `--addr "nonsense": address nonsense: missing port in address`},
		{[]string{"--mcp", "--progress=maybe"}, `invalid boolean value "maybe" for -progress`},
	}
	// A canceled context makes a server that wrongly starts stop at once.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := runChaos(ctx, tt.args, &stdout, &stderr)
		msg := stderr.String()
		if code != 2 || stdout.Len() != 0 || strings.Count(msg, "\n") != 1 ||
			!strings.HasPrefix(msg, "rebound chaos: ") || !strings.Contains(msg, tt.want) {
			t.Errorf("runChaos(%q) = %d, stdout %q, stderr %q; want 2 and one line containing %q",
				tt.args, code, stdout.String(), msg, tt.want)
		}
	}
}

func TestRunChaosMCPHelpDocumentsItsFlags(t *testing.T) {
	code, help, _ := runCmd("help", "chaos")
	if code != 0 {
		t.Fatalf("help chaos: exit %d", code)
	}
	for _, flag := range append([]string{"mcp", "slow", "seed", "addr"}, chaosrun.MCPOnly...) {
		if !strings.Contains(help, "\n  -"+flag+" ") && !strings.Contains(help, "\n  -"+flag+"\n") {
			t.Errorf("help chaos lists no -%s", flag)
		}
		if flag != "mcp" && !strings.Contains(help, "--"+flag) {
			t.Errorf("help chaos's text does not say what --%s does", flag)
		}
	}
}

// connectMCP connects the SDK's client through tr.
func connectMCP(t *testing.T, tr mcp.Transport) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func appendX(t *testing.T, cs *mcp.ClientSession) error {
	t.Helper()
	_, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: chaosmcp.ToolAppend, Arguments: map[string]any{"key": "k", "value": "x"}})
	return err
}

func TestRunChaosMCPStdioCrashesAfterTheCallRan(t *testing.T) {
	file := filepath.Join(t.TempDir(), "counts")
	cmd := commandProcess(t, "chaos", "--mcp", "--crash-after", "2", "--count-file", file, "--seed", "5")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	cs := connectMCP(t, &mcp.CommandTransport{Command: cmd})
	defer cs.Close()
	hints := map[string]string{}
	for tool, err := range cs.Tools(t.Context(), nil) {
		if err != nil {
			t.Fatal(err)
		}
		a := tool.Annotations
		hints[tool.Name] = map[bool]string{true: "readOnly"}[a.ReadOnlyHint] + map[bool]string{true: "idempotent"}[a.IdempotentHint]
	}
	if hints["lookup"] != "readOnlyidempotent" || hints["set"] != "idempotent" || hints["append"] != "" || len(hints) != 3 {
		t.Errorf("tools and hints %v", hints)
	}
	if err := appendX(t, cs); err != nil {
		t.Fatal(err)
	}
	if err := appendX(t, cs); err == nil {
		t.Fatal("the second call answered; --crash-after 2 should have ended the process")
	}
	cs.Wait()
	if code := cmd.ProcessState.ExitCode(); code != chaosmcp.CrashExitCode {
		t.Errorf("exit code %d, want %d", code, chaosmcp.CrashExitCode)
	}
	if counts, err := chaosmcp.ReadCounts(file); err != nil || counts["append"] != 2 {
		t.Errorf("count file %v, %v; want 2 appends", counts, err)
	}
	if !strings.Contains(stderr.String(), "rebound chaos: MCP server, seed 5\n") {
		t.Errorf("stderr %q does not give the seed", stderr.String())
	}
}

func TestRunChaosMCPStdioEndsWhenStdinCloses(t *testing.T) {
	cmd := commandProcess(t, "chaos", "--mcp")
	cs := connectMCP(t, &mcp.CommandTransport{Command: cmd})
	if err := appendX(t, cs); err != nil {
		t.Fatal(err)
	}
	cs.Close()
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after stdin closed, want 0", code)
	}
}

// startChaosMCPProcess starts "rebound chaos --mcp --addr 127.0.0.1:0"
// with args as a process of its own and returns it, its URL and its stderr.
func startChaosMCPProcess(t *testing.T, args ...string) (cmd *exec.Cmd, url string, stderr io.Reader) {
	t.Helper()
	cmd = commandProcess(t, append([]string{"chaos", "--mcp", "--addr", "127.0.0.1:0"}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	stderr, _ = cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:[0-9]+)\n$`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("first stdout line %q", line)
	}
	return cmd, m[1], stderr
}

// A call in flight does not keep the server from stopping: the sessions
// are closed, and closing one waits for its calls.
func TestRunChaosMCPHTTPStopsWithACallInFlight(t *testing.T) {
	cmd, url, stderr := startChaosMCPProcess(t, "--slow", "1h", "--progress")
	go io.Copy(io.Discard, stderr)
	inFlight := make(chan struct{}, 1)
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case inFlight <- struct{}{}:
			default:
			}
		},
	}).Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	go func() {
		params := &mcp.CallToolParams{Name: chaosmcp.ToolLookup, Arguments: map[string]any{"key": "k"}}
		params.SetProgressToken("p")
		cs.CallTool(t.Context(), params)
	}()
	<-inFlight
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM with a call in flight: %v, want exit 0", err)
	}
}

// TestRunChaosMCPHTTPLosesSessions runs the HTTP server as a process of
// its own, so that it can be sent SIGHUP.
func TestRunChaosMCPHTTPLosesSessions(t *testing.T) {
	cmd, url, stderrPipe := startChaosMCPProcess(t, "--lose-sessions-every", "3")
	stderr := bufio.NewScanner(stderrPipe)
	cs := connectMCP(t, &mcp.StreamableClientTransport{Endpoint: url + "/mcp"})
	for range 2 {
		if err := appendX(t, cs); err != nil {
			t.Fatal(err)
		}
	}
	if err := appendX(t, cs); !errors.Is(err, mcp.ErrSessionMissing) {
		t.Errorf("the third call: %v, want ErrSessionMissing", err)
	}
	cs = connectMCP(t, &mcp.StreamableClientTransport{Endpoint: url + "/mcp"})
	if err := appendX(t, cs); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGHUP)
	for stderr.Scan() && stderr.Text() != "rebound chaos: SIGHUP: every session lost" {
	}
	if err := appendX(t, cs); !errors.Is(err, mcp.ErrSessionMissing) {
		t.Errorf("a call after SIGHUP: %v, want ErrSessionMissing", err)
	}
	resp, err := http.Get(url + "/chaos/counts")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != `{"append":3}`+"\n" {
		t.Errorf("GET /chaos/counts: %s, want 3 appends", body)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	go io.Copy(io.Discard, stderrPipe)
	if err := cmd.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
}
