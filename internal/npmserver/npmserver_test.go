package npmserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// The test binary stands in for npm (fakeNpmEnv) and for a test binary
// that installs (installEnv) when these are set.
const (
	fakeNpmEnv = "NPMSERVER_TEST_FAKE_NPM" // the file it counts its runs in
	fakeFail   = "NPMSERVER_TEST_FAKE_NPM_FAILS"
	installEnv = "NPMSERVER_TEST_INSTALL"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(fakeNpmEnv) != "":
		os.Exit(fakeNpm(os.Args[1:]))
	case os.Getenv(installEnv) != "":
		script, err := Install(context.Background(), Everything)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		fmt.Println(script)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeNpm does what "npm install --prefix DIR NAME@VERSION" does, for the
// manifest and script Install checks, and counts its runs.
func fakeNpm(args []string) int {
	f, err := os.OpenFile(os.Getenv(fakeNpmEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return 1
	}
	fmt.Fprintln(f, strings.Join(args, " "))
	f.Close()
	if os.Getenv(fakeFail) != "" {
		fmt.Println("npm http fetch GET 404 somewhere")
		fmt.Println("npm error 404 Not Found - no such package")
		fmt.Println("npm error A complete log of this run can be found in: a file")
		return 1
	}
	var prefix, spec string
	for i, a := range args {
		if a == "--prefix" && i+1 < len(args) {
			prefix = args[i+1]
		}
		spec = a
	}
	name, version, _ := strings.Cut(spec[1:], "@")
	pkg := filepath.Join(prefix, "node_modules", "@"+name)
	os.MkdirAll(filepath.Join(pkg, "dist"), 0o755)
	os.WriteFile(filepath.Join(pkg, "package.json"), fmt.Appendf(nil, `{"version":%q,"bin":{"mcp-server-everything":"dist/index.js"}}`, version), 0o644)
	os.WriteFile(filepath.Join(pkg, "dist", "index.js"), nil, 0o644)
	return 0
}

// fakeTools makes a folder holding a node that does nothing and an npm
// that is this test binary, and returns it and the file npm counts its
// runs in.
func fakeTools(t *testing.T) (bin, runs string) {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake node and npm are shell scripts")
	}
	bin, runs = t.TempDir(), filepath.Join(t.TempDir(), "runs")
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("node", "exit 0")
	write("npm", fmt.Sprintf("%s=%q exec %q \"$@\"", fakeNpmEnv, runs, os.Args[0]))
	return bin, runs
}

func TestInstallRunsNpmOnceAcrossProcesses(t *testing.T) {
	bin, runs := fakeTools(t)
	cache := t.TempDir()
	const procs = 4
	outs := make([]string, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), installEnv+"=1", "PATH="+bin, CacheEnv+"="+cache)
			out, _ := cmd.CombinedOutput()
			outs[i] = string(out)
		})
	}
	wg.Wait()
	want := filepath.Join(cache, "@modelcontextprotocol+server-everything@"+Everything.Version,
		"node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js") + "\n"
	for i, out := range outs {
		if out != want {
			t.Errorf("process %d printed %q, want %q", i, out, want)
		}
	}
	data, _ := os.ReadFile(runs)
	if n := strings.Count(string(data), "\n"); n != 1 {
		t.Errorf("npm ran %d times, want once:\n%s", n, data)
	}
	if !strings.Contains(string(data), "install --prefix ") || !strings.HasSuffix(string(data), " "+Everything.Name+"@"+Everything.Version+"\n") {
		t.Errorf("npm ran as %q", data)
	}
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("a temporary folder was left in the cache: %s", e.Name())
		}
	}
	// A broken install is replaced.
	t.Setenv("PATH", bin)
	t.Setenv(CacheEnv, cache)
	os.Remove(strings.TrimSuffix(want, "\n"))
	if script, err := Install(t.Context(), Everything); err != nil || script+"\n" != want {
		t.Errorf("Install over a broken install: %q, %v", script, err)
	}
	// Installed, it needs no npm.
	os.Remove(filepath.Join(bin, "npm"))
	if script, err := Install(t.Context(), Everything); err != nil || script+"\n" != want {
		t.Errorf("Install of an installed package: %q, %v", script, err)
	}
}

func TestInstallFailureIsOneLineAndLeavesNothing(t *testing.T) {
	bin, _ := fakeTools(t)
	cache := t.TempDir()
	t.Setenv("PATH", bin)
	t.Setenv(CacheEnv, cache)
	t.Setenv(fakeFail, "1")
	_, err := Install(t.Context(), Memory)
	var ie *InstallError
	if !errors.As(err, &ie) || strings.Contains(err.Error(), "\n") || !strings.HasSuffix(err.Error(), ": npm error 404 Not Found - no such package") {
		t.Fatalf("Install: %v; want a one-line *InstallError ending in npm's error line", err)
	}
	entries, _ := os.ReadDir(cache)
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".lock") {
			t.Errorf("a failed install left %s in the cache", e.Name())
		}
	}
}

func TestInstallWithoutNodeSaysWhatToDo(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(CacheEnv, t.TempDir())
	_, err := Install(t.Context(), Memory)
	if !errors.Is(err, ErrNoNode) || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), SkipEnv+"=1") {
		t.Fatalf("Install without node: %v; want ErrNoNode in one line naming %s", err, SkipEnv)
	}
}

// initialize sends an MCP initialize request to a stdio server and
// returns the name its answer gives.
func initialize(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("%s: no answer to initialize: %v", cmd.Args[1], err)
	}
	var resp struct {
		Result struct{ ServerInfo struct{ Name string } }
	}
	json.Unmarshal([]byte(line), &resp)
	return resp.Result.ServerInfo.Name
}

func TestStdioServersAnswerInitialize(t *testing.T) {
	if name := initialize(t, EverythingStdio(t)); name == "" {
		t.Error("the everything server gave no server name")
	}
	if name := initialize(t, MemoryStdio(t, filepath.Join(t.TempDir(), "memory.jsonl"))); name == "" {
		t.Error("the memory server gave no server name")
	}
}

func TestEverythingHTTPListensOnLoopbackOnlyAndRestarts(t *testing.T) {
	s := EverythingHTTP(t)
	if !strings.HasPrefix(s.URL, "http://127.0.0.1:") || !strings.HasSuffix(s.URL, "/mcp") {
		t.Fatalf("URL %q", s.URL)
	}
	_, port, _ := net.SplitHostPort(strings.TrimSuffix(strings.TrimPrefix(s.URL, "http://"), "/mcp"))
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ip, ok := a.(*net.IPNet)
		if !ok || ip.IP.IsLoopback() || ip.IP.IsLinkLocalUnicast() {
			continue
		}
		if c, err := net.Dial("tcp", net.JoinHostPort(ip.IP.String(), port)); err == nil {
			c.Close()
			t.Errorf("the server answers on %s, not only on loopback", ip.IP)
		}
	}
	first := s.Cmd.Process.Pid
	s.Restart()
	if s.Cmd.Process.Pid == first {
		t.Error("Restart kept the process")
	}
	if err := answers(t.Context(), s.URL); err != nil {
		t.Errorf("after Restart: %v", err)
	}
	s.Kill()
	if err := answers(t.Context(), s.URL); err == nil {
		t.Error("the server answers after Kill")
	}
}
