package chaosmcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"
)

// connect serves srv to a client over in-memory transports, until t ends.
func connect(t *testing.T, srv *Server, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	serverEnd, clientEnd := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { srv.Run(ctx, serverEnd); close(ran) }()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, opts).Connect(ctx, clientEnd, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close(); cancel(); <-ran })
	return cs
}

// callTool calls tool with key and value (lookup takes none) and returns its result's text,
// or the isError result's text prefixed "error: ".
func callTool(ctx context.Context, cs *mcp.ClientSession, tool, key, value string) (string, error) {
	args := map[string]any{"key": key}
	if tool != ToolLookup {
		args["value"] = value
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if res.IsError {
		text = "error: " + text
	}
	return text, nil
}

func TestZeroConfigIsWellBehaved(t *testing.T) {
	srv, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	cs := connect(t, srv, nil)
	for i := range 20 {
		steps := []struct{ tool, value, want string }{
			{ToolSet, "v", "v"},
			{ToolAppend, "w", "vw"},
			{ToolLookup, "", "vw"},
		}
		for _, st := range steps {
			got, err := callTool(t.Context(), cs, st.tool, fmt.Sprint("k", i), st.value)
			if err != nil || got != st.want {
				t.Fatalf("%s: %q, %v; want %q", st.tool, got, err, st.want)
			}
		}
	}
	if got := srv.Counts(); got[ToolSet] != 20 || got[ToolAppend] != 20 || got[ToolLookup] != 20 {
		t.Errorf("counts %v, want 20 of each", got)
	}
}

func TestNewRefusesBadConfigs(t *testing.T) {
	for _, c := range []Config{
		{CrashRate: -0.1}, {HangRate: 1.5}, {ErrorRate: nan()}, {CrashRate: 0.5, HangRate: 0.3, ErrorRate: 0.3},
		{CrashAfter: -1}, {LoseSessionsEvery: -2}, {Slow: -time.Second},
	} {
		if _, err := New(c); !errors.Is(err, ErrBadConfig) {
			t.Errorf("New(%+v): %v, want ErrBadConfig", c, err)
		}
	}
	if _, err := New(Config{CountFile: t.TempDir()}); err == nil {
		t.Error("New with a folder for a count file: no error")
	}
}

func nan() float64 { var zero float64; return zero / zero }

func TestErrorsAreSeededAndDoNotRun(t *testing.T) {
	outcomes := func(seed uint64) (seq string, runs int) {
		srv, err := New(Config{ErrorRate: 0.3, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		cs := connect(t, srv, nil)
		for range 200 {
			got, err := callTool(t.Context(), cs, ToolAppend, "k", "x")
			if err != nil {
				t.Fatal(err)
			}
			seq += map[bool]string{true: "E", false: "."}[got[0] == 'e']
		}
		return seq, srv.Counts()[ToolAppend]
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	a, runs := outcomes(seed)
	if b, _ := outcomes(seed); a != b {
		t.Errorf("one seed gave two sequences:\n%s\n%s", a, b)
	}
	errs := 0
	for _, c := range a {
		if c == 'E' {
			errs++
		}
	}
	if errs+runs != 200 || errs < 30 || errs > 90 {
		t.Errorf("%d isError results and %d runs of 200 calls at rate 0.3", errs, runs)
	}
}

func TestHangNeverRunsAndEndsWithTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := New(Config{HangRate: 1})
		if err != nil {
			t.Fatal(err)
		}
		cs := connect(t, srv, nil)
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour)
		defer cancel()
		start := time.Now()
		if _, err := callTool(ctx, cs, ToolAppend, "k", "x"); err == nil {
			t.Fatal("a hanging call answered")
		}
		if d := time.Since(start); d != time.Hour {
			t.Errorf("the call ended after %v, want when its context did (1h)", d)
		}
		if n := srv.Counts()[ToolAppend]; n != 0 {
			t.Errorf("a hanging call ran %d times", n)
		}
	})
}

func TestSlowCallSendsProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := New(Config{Slow: 10 * time.Second, Progress: true})
		if err != nil {
			t.Fatal(err)
		}
		var progress atomic.Int32
		cs := connect(t, srv, &mcp.ClientOptions{
			ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
		})
		start := time.Now()
		params := &mcp.CallToolParams{Name: ToolLookup, Arguments: map[string]any{"key": "k"}}
		params.SetProgressToken("p")
		if _, err := cs.CallTool(t.Context(), params); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 10*time.Second {
			t.Errorf("the slow call took %v, want 10s", d)
		}
		synctest.Wait()
		if n := progress.Load(); n < 9 || n > 10 {
			t.Errorf("%d progress notifications in a 10s call, want one a second", n)
		}
		// Without a progress token, none.
		progress.Store(0)
		if _, err := callTool(t.Context(), cs, ToolLookup, "k", ""); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := progress.Load(); n != 0 {
			t.Errorf("%d progress notifications to a call that asked for none", n)
		}
	})
}

// serveEnv makes the test binary serve a Config (JSON) over stdio.
const serveEnv = "CHAOSMCP_TEST_SERVE"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(serveEnv); cfg != "" {
		var c Config
		if err := json.Unmarshal([]byte(cfg), &c); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		srv, err := New(c)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if err := srv.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// serverProcess returns the command of a process serving c over stdio.
func serverProcess(t *testing.T, c Config) *exec.Cmd {
	t.Helper()
	data, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serveEnv+"="+string(data))
	return cmd
}

func TestCrashAfterRunsTheCallThenExits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "counts")
	cmd := serverProcess(t, Config{CrashAfter: 2, CountFile: file})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := callTool(t.Context(), cs, ToolAppend, "k", "x"); err != nil {
		t.Fatal(err)
	}
	if got, err := callTool(t.Context(), cs, ToolAppend, "k", "x"); err == nil {
		t.Fatalf("the crashing call answered %q", got)
	}
	cs.Wait()
	if code := cmd.ProcessState.ExitCode(); code != CrashExitCode {
		t.Errorf("exit code %d, want %d", code, CrashExitCode)
	}
	if counts, err := ReadCounts(file); err != nil || counts[ToolAppend] != 2 {
		t.Errorf("count file: %v, %v; want both runs, the crashing one too", counts, err)
	}
	again, err := New(Config{CountFile: file})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if n := again.Counts()[ToolAppend]; n != 2 {
		t.Errorf("a server started on the count file counts %d appends, want 2", n)
	}
}

func TestCrashRateIsSeeded(t *testing.T) {
	// Each process runs calls until a crash; the same seed crashes at the
	// same call.
	crashAt := func(seed uint64) int {
		file := filepath.Join(t.TempDir(), "counts")
		cmd := serverProcess(t, Config{CrashRate: 0.2, Seed: seed, CountFile: file})
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		for i := 1; i <= 200; i++ {
			if _, err := callTool(t.Context(), cs, ToolSet, "k", "v"); err != nil {
				counts, _ := ReadCounts(file)
				if counts[ToolSet] != i {
					t.Errorf("crashed at call %d, but the count file counts %d runs", i, counts[ToolSet])
				}
				return i
			}
		}
		t.Fatal("no crash in 200 calls at rate 0.2")
		return 0
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	if a, b := crashAt(seed), crashAt(seed); a != b {
		t.Errorf("one seed crashed at call %d and at call %d", a, b)
	}
}

func TestReadCountsSkipsALineCutShortAndRefusesGarbage(t *testing.T) {
	dir := t.TempDir()
	cut := filepath.Join(dir, "cut")
	os.WriteFile(cut, []byte(`{"tool":"set","args":{}}`+"\n"+`{"tool":"append","ar`), 0o644)
	if c, err := ReadCounts(cut); err != nil || !mapsEqual(c, map[string]int{ToolSet: 1}) {
		t.Errorf("a file whose last line was cut short: %v, %v; want 1 set", c, err)
	}
	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte(`{"tool":"set","args":{}}`+"\nnot json\n"), 0o644)
	if _, err := ReadCounts(garbage); err == nil {
		t.Error("a file with a line that is not a count: no error")
	}
	if _, err := New(Config{CountFile: garbage}); err == nil {
		t.Error("New on a file that is not a count file: no error")
	}
}
