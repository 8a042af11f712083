package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// syncBuffer is a command's stderr that a test reads while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// mcpProcess returns "rebound mcp args..." as a process of its own, its
// stderr logged when the test ends.
func mcpProcess(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	cmd := commandProcess(t, append([]string{"mcp"}, args...)...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	t.Cleanup(func() { t.Logf("rebound mcp's stderr:\n%s", stderr.String()) })
	return cmd
}

// waitExit waits up to d for the process pid to exit (a zombie has), by
// its pidfd, and reports whether it did.
func waitExit(t *testing.T, pid int, d time.Duration) bool {
	t.Helper()
	fd, _, errno := syscall.Syscall(434 /* pidfd_open */, uintptr(pid), 0, 0)
	if errno == syscall.ESRCH {
		return true
	}
	if errno != 0 {
		t.Fatalf("pidfd_open(%d): %v", pid, errno)
	}
	defer syscall.Close(int(fd))
	var set syscall.FdSet
	set.Bits[fd/64] |= 1 << (fd % 64)
	tv := syscall.NsecToTimeval(d.Nanoseconds())
	for {
		n, err := syscall.Select(int(fd)+1, &set, nil, nil, &tv)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			t.Fatalf("select on pidfd: %v", err)
		}
		return n == 1
	}
}

// callInt calls a test-server tool that answers a number.
func callInt(t *testing.T, cs *mcp.ClientSession, tool string) int {
	t.Helper()
	// A call left unanswered fails here, with rebound mcp's stderr, rather
	// than at the suite's timeout without it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	if res.IsError || len(res.Content) != 1 {
		t.Fatalf("tools/call %s: %+v", tool, res)
	}
	n, err := strconv.Atoi(res.Content[0].(*mcp.TextContent).Text)
	if err != nil {
		t.Fatalf("tools/call %s: %v", tool, err)
	}
	return n
}

// TestMCPStdioGoSDKClient: the Go SDK's own client, through "rebound mcp"
// over stdio, lists and calls a Go SDK server's tools; the server killed,
// the next read-only call is answered by a new one, unseen; the client
// closing its session ends the command with 0 and the server with it.
func TestMCPStdioGoSDKClient(t *testing.T) {
	cmd := mcpProcess(t, testServer("")...)
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Minute}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	if strings.Join(names, ",") != "env,exit,first_start_dies,pid,spawn" {
		t.Errorf("tools %v, want env, exit, first_start_dies, pid and spawn", names)
	}
	first := callInt(t, cs, "pid")
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !waitExit(t, first, 10*time.Second) {
		t.Fatal("the killed server did not exit")
	}
	second := callInt(t, cs, "pid")
	if second == first {
		t.Fatalf("pid %d after the server was killed: no new server", second)
	}
	if err := cs.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
	if code := cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d after the client closed stdin, want 0", code)
	}
	if !waitExit(t, second, 10*time.Second) {
		t.Errorf("server %d still running after the command exited", second)
	}
}

// rawSession speaks newline-delimited JSON-RPC to a started "rebound
// mcp" over its stdin and stdout, as a client that is not the SDK's.
type rawSession struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Scanner
	id     int
}

func startRaw(t *testing.T, cmd *exec.Cmd) *rawSession {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	s := &rawSession{t: t, cmd: cmd, stdin: stdin, stdout: bufio.NewScanner(stdout)}
	s.call("initialize", `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}`)
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

// call sends a request and returns its result, skipping notifications.
func (s *rawSession) call(method, params string) json.RawMessage {
	s.t.Helper()
	s.id++
	fmt.Fprintf(s.stdin, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`+"\n", s.id, method, params)
	for s.stdout.Scan() {
		var msg struct {
			ID     *int            `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal(s.stdout.Bytes(), &msg); err != nil {
			s.t.Fatalf("stdout carries something other than JSON-RPC: %q", s.stdout.Text())
		}
		if msg.ID != nil && *msg.ID == s.id {
			if msg.Error != nil {
				s.t.Fatalf("%s: error %s", method, msg.Error)
			}
			return msg.Result
		}
	}
	s.t.Fatalf("%s: stdout ended: %v", method, s.stdout.Err())
	return nil
}

// callInt calls a test-server tool that answers a number.
func (s *rawSession) callInt(tool string) int {
	s.t.Helper()
	var res struct {
		Content []struct{ Text string } `json:"content"`
	}
	json.Unmarshal(s.call("tools/call", `{"name":"`+tool+`","arguments":{}}`), &res)
	if len(res.Content) != 1 {
		s.t.Fatalf("tools/call %s: %+v", tool, res)
	}
	n, err := strconv.Atoi(res.Content[0].Text)
	if err != nil {
		s.t.Fatalf("tools/call %s: %v", tool, err)
	}
	return n
}

// exitCode waits for the command, at most a minute, and returns its code.
func (s *rawSession) exitCode() int {
	s.t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		s.t.Fatal("rebound mcp did not exit within a minute")
	}
	return s.cmd.ProcessState.ExitCode()
}

// TestMCPStdinClosedExitsZero: a client that closes stdin ends the
// command with 0, and the server's whole process group with it (what
// it spawned too), without a signal.
func TestMCPStdinClosedExitsZero(t *testing.T) {
	s := startRaw(t, mcpProcess(t, testServer("")...))
	server, sleeper := s.callInt("pid"), s.callInt("spawn")
	s.stdin.Close()
	if code := s.exitCode(); code != 0 {
		t.Errorf("exit code %d after stdin closed, want 0", code)
	}
	for _, pid := range []int{server, sleeper} {
		if !waitExit(t, pid, 10*time.Second) {
			t.Errorf("process %d of the server's group outlived the command", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestMCPSIGTERMLeavesNoOrphan: SIGTERM (and SIGINT) end the command with
// 0 and leave nothing of the server's process group running.
func TestMCPSIGTERMLeavesNoOrphan(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			s := startRaw(t, mcpProcess(t, testServer("")...))
			server, sleeper := s.callInt("pid"), s.callInt("spawn")
			s.cmd.Process.Signal(sig)
			if code := s.exitCode(); code != 0 {
				t.Errorf("exit code %d after %v, want 0", code, sig)
			}
			for _, pid := range []int{server, sleeper} {
				if !waitExit(t, pid, 10*time.Second) {
					t.Errorf("process %d of the server's group outlived the command", pid)
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		})
	}
}

// TestMCPCallCutShortByACrash: through the command, a read-only call the
// server dies under is sent again to the next server and answered; a
// side-effecting one runs once and the caller gets an error naming the
// tool and saying it may have taken effect. The session goes on.
func TestMCPCallCutShortByACrash(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "starts")
	cmd := mcpProcess(t, append([]string{"--name", "test"}, testServer(mark)...)...)
	client := mcp.NewClient(&mcp.Implementation{Name: "rebound-test", Version: "1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	pid := callInt(t, cs, "first_start_dies")
	if starts := serverStarts(t, mark); len(starts) != 2 || starts[1] != pid {
		t.Errorf("starts %v, answer from %d: want the call answered by the second start", starts, pid)
	}
	_, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "exit", Arguments: map[string]any{}})
	want := `reboundmcp: MCP server test died while tool "exit" ran: the call may have taken effect, and was not sent again`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("tools/call exit: %v, want an error with %q", err, want)
	}
	data, _ := os.ReadFile(mark)
	if n := strings.Count(string(data), "exit\n"); n != 1 {
		t.Errorf("the side-effecting tool ran %d times, want once", n)
	}
	if again := callInt(t, cs, "pid"); again == pid {
		t.Errorf("pid %d after the server died: no new server", again)
	}
}

// TestMCPUnreadableClientLineIsAnsweredAndServingGoesOn: a line from the
// client that is not JSON-RPC gets JSON-RPC's parse error (-32700, id
// null), and the client's next request is answered as if it had not come.
func TestMCPUnreadableClientLineIsAnsweredAndServingGoesOn(t *testing.T) {
	cmd := mcpProcess(t, "--", os.Args[0], mcpServerArg, "")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		in.Close()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(out)
	next := func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("rebound mcp's output ended: %v", lines.Err())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("rebound mcp wrote %q: %v", lines.Bytes(), err)
		}
		return m
	}
	io.WriteString(in, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\" this is not JSON\n")
	got := next()
	if e, _ := got["error"].(map[string]any); e["code"] != -32700.0 || got["id"] != nil || !hasKey(got, "id") {
		t.Fatalf("the bad line got %v; want a parse error with id null", got)
	}
	io.WriteString(in, `{"jsonrpc":"2.0","id":2,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	if got := next(); got["id"] != 2.0 || got["result"] == nil {
		t.Fatalf("the initialize after the bad line got %v", got)
	}
}

func hasKey(m map[string]any, k string) bool {
	_, ok := m[k]
	return ok
}

// TestMCPSecondSignalLeavesNoOrphan: a second SIGTERM (Ctrl-C twice)
// while a server that ignores SIGTERM is given its grace does not kill
// the command before the server's group: nothing is left running, and the
// command still exits 0.
func TestMCPSecondSignalLeavesNoOrphan(t *testing.T) {
	// A server that outlives its stdin and ignores SIGTERM: only SIGKILL
	// ends its group.
	stubborn := []string{"--", "sh", "-c", `trap "" TERM; "$0" "$1"; sleep 600`, os.Args[0], mcpServerArg}
	s := startRaw(t, mcpProcess(t, stubborn...))
	server, sleeper := s.callInt("pid"), s.callInt("spawn")
	s.cmd.Process.Signal(syscall.SIGTERM)
	// The server ignores the first: the command waits out the grace before
	// SIGKILL, and the second signal comes during it.
	if waitExit(t, s.cmd.Process.Pid, 500*time.Millisecond) {
		t.Fatal("the command exited before the server's grace ran out: the server did not ignore SIGTERM")
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	if code := s.exitCode(); code != 0 {
		t.Errorf("exit code %d after two SIGTERMs, want 0", code)
	}
	for _, pid := range []int{server, sleeper} {
		if !waitExit(t, pid, 10*time.Second) {
			t.Errorf("process %d of the server's group outlived the command", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestMCPKilledLeavesNoServer: "rebound mcp" killed with SIGKILL (as
// the OOM killer kills) can end nothing itself; its server, one that does
// not exit when its stdin closes, is ended by the kernel, not left
// running for ever.
func TestMCPKilledLeavesNoServer(t *testing.T) {
	s := startRaw(t, mcpProcess(t, "--", os.Args[0], mcpServerArg, "", "linger"))
	server := s.callInt("pid")
	t.Cleanup(func() { syscall.Kill(server, syscall.SIGKILL) })
	s.cmd.Process.Kill() // reaped at cleanup: the server holds its stderr's pipe while it lives
	if !waitExit(t, server, 10*time.Second) {
		t.Errorf("the server %d outlived the killed rebound mcp", server)
	}
}

// TestMCPSIGHUPLeavesNoOrphan: SIGHUP (the terminal rebound runs in
// closed) stops the command as SIGTERM does: the server's group, in a
// process group of its own, gets no SIGHUP from the terminal, and must
// not be left running when rebound dies of it.
func TestMCPSIGHUPLeavesNoOrphan(t *testing.T) {
	s := startRaw(t, mcpProcess(t, testServer("")...))
	server, sleeper := s.callInt("pid"), s.callInt("spawn")
	s.cmd.Process.Signal(syscall.SIGHUP)
	if code := s.exitCode(); code != 0 {
		t.Errorf("exit code %d after SIGHUP, want 0", code)
	}
	for _, pid := range []int{server, sleeper} {
		if !waitExit(t, pid, 10*time.Second) {
			t.Errorf("process %d of the server's group outlived the command", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
