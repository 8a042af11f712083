package npmserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// TB is the part of testing.TB the servers use: a test that fails, skips
// and cleans up.
type TB interface {
	Helper()
	Context() context.Context
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Cleanup(func())
}

// installTimeout bounds one npm install, network included.
const installTimeout = 10 * time.Minute

// need installs p for t and returns node's path and p's script; it skips
// t if SkipEnv asks and fails it with one line on any error.
func need(t TB, p Package) (node, script string) {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" {
		t.Skipf("%s=1: not running the real package %s", SkipEnv, p.Name)
	}
	ctx, cancel := context.WithTimeout(t.Context(), installTimeout)
	defer cancel()
	script, err := Install(ctx, p)
	if err != nil {
		t.Fatalf("%v", err)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		t.Fatalf("npmserver: %v", ErrNoNode)
	}
	return node, script
}

// childEnv is the environment of a server: what node needs, and extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return append(env, extra...)
}

// NodeScript returns a command, not started, that runs the JavaScript
// file script with node, p (a library, such as OpenAI) installed where
// its require finds it, and an environment of PATH, HOME, TMPDIR and
// extra ("NAME=value") only.
func NodeScript(t TB, p Package, script string, extra ...string) *exec.Cmd {
	t.Helper()
	return NodeScriptWith(t, []Package{p}, script, extra...)
}

// NodeScriptWith is NodeScript with every library of ps where the
// script's require finds it: each is installed in a folder of its own,
// and NODE_PATH lists them all.
func NodeScriptWith(t TB, ps []Package, script string, extra ...string) *exec.Cmd {
	t.Helper()
	var node string
	var paths []string
	for _, p := range ps {
		var modules string
		node, modules = need(t, p)
		paths = append(paths, modules)
	}
	cmd := exec.Command(node, script)
	cmd.Env = childEnv(append([]string{"NODE_PATH=" + strings.Join(paths, string(os.PathListSeparator))}, extra...)...)
	return cmd
}

// EverythingStdio returns a command, not started, that runs the everything
// server over stdio.
func EverythingStdio(t TB) *exec.Cmd {
	t.Helper()
	node, script := need(t, Everything)
	cmd := exec.Command(node, script, "stdio")
	cmd.Env = childEnv()
	return cmd
}

// MemoryStdio returns a command, not started, that runs the memory server
// over stdio, keeping its knowledge graph in file (one JSON object a line), so
// that the graph outlives the process: a test reads it to count what ran.
func MemoryStdio(t TB, file string) *exec.Cmd {
	t.Helper()
	node, script := need(t, Memory)
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatalf("npmserver: %v", err)
	}
	cmd := exec.Command(node, script)
	cmd.Env = childEnv("MEMORY_FILE_PATH=" + abs)
	return cmd
}

// loopbackOnly is a module node loads first: the everything server listens
// on the port in $PORT with no host, which is every interface, and has a
// tool that echoes its environment, so a listen on a bare port is made a
// listen on 127.0.0.1.
const loopbackOnly = `import net from "node:net";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
	if (/^[0-9]+$/.test(String(args[0])) && typeof args[1] !== "string") args.splice(1, 0, "127.0.0.1");
	return listen.apply(this, args);
};`

// An HTTPServer is the everything server in its streamable HTTP mode,
// running on a loopback port.
type HTTPServer struct {
	URL string    // its MCP endpoint, http://127.0.0.1:PORT/mcp
	Cmd *exec.Cmd // the running process; Restart replaces it

	t            TB
	node, script string
	port         string
	exited       chan struct{} // closed when Cmd has been waited for
}

// EverythingHTTP starts the everything server's streamable HTTP mode on a
// free loopback port and returns once it answers. The server is killed
// when t ends.
func EverythingHTTP(t TB) *HTTPServer {
	t.Helper()
	node, script := need(t, Everything)
	s := &HTTPServer{t: t, node: node, script: script}
	t.Cleanup(s.Kill)
	var err error
	// A port found free can be taken before the server binds it; a few
	// tries make that a non-event.
	for range 3 {
		if s.port, err = freePort(); err != nil {
			break
		}
		s.URL = "http://127.0.0.1:" + s.port + "/mcp"
		if err = s.start(); !errors.Is(err, errPortTaken) {
			break
		}
	}
	if err != nil {
		t.Fatalf("npmserver: %v", err)
	}
	return s
}

// Kill kills the server, if it runs, and waits for it to exit: its
// sessions are gone with it.
func (s *HTTPServer) Kill() {
	if s.exited == nil {
		return
	}
	s.Cmd.Process.Kill()
	<-s.exited
	s.exited = nil
}

// Restart kills the server if it runs and starts a new one on the same
// port, returning once it answers: a server that restarted, which knows
// none of the sessions its clients hold.
func (s *HTTPServer) Restart() {
	s.t.Helper()
	s.Kill()
	if err := s.start(); err != nil {
		s.t.Fatalf("npmserver: restarting %s: %v", s.URL, err)
	}
}

var errPortTaken = errors.New("port taken")

// start starts the server on s.port and waits until it answers.
func (s *HTTPServer) start() error {
	cmd := exec.Command(s.node, "--import", "data:text/javascript,"+url.PathEscape(loopbackOnly), s.script, "streamableHttp")
	cmd.Env = childEnv("PORT=" + s.port)
	stderr := &watch{want: "listening on port", seen: make(chan struct{})}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.Cmd, s.exited = cmd, exited

	ctx, cancel := context.WithTimeout(s.t.Context(), time.Minute)
	defer cancel()
	select {
	case <-stderr.seen:
	case <-exited:
		s.exited = nil
		if strings.Contains(stderr.text(), "EADDRINUSE") || strings.Contains(stderr.text(), "already in use") {
			return errPortTaken
		}
		return fmt.Errorf("the everything server exited before listening: %s", lastLine(stderr.text()))
	case <-ctx.Done():
		s.Kill()
		return fmt.Errorf("the everything server did not listen on port %s: %w", s.port, ctx.Err())
	}
	if err := answers(ctx, s.URL); err != nil {
		s.Kill()
		return err
	}
	return nil
}

// answers sends url an empty POST, which a live server refuses with an
// HTTP answer.
func answers(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, "POST", url, strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("the everything server does not answer: %w", err)
	}
	resp.Body.Close()
	return nil
}

// freePort returns a loopback port that nothing listens on just now.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	_, port, err := net.SplitHostPort(l.Addr().String())
	return port, err
}

// watch is a server's stderr: it closes seen once a line containing want
// has been written, and keeps the first few kilobytes for error messages.
type watch struct {
	want string
	seen chan struct{}

	mu   sync.Mutex
	buf  []byte
	done bool
}

const watchKeep = 8 << 10

func (w *watch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) < watchKeep {
		w.buf = append(w.buf, p[:min(len(p), watchKeep-len(w.buf))]...)
	}
	if !w.done && strings.Contains(string(w.buf), w.want) {
		w.done = true
		close(w.seen)
	}
	return len(p), nil
}

func (w *watch) text() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}

// lastLine is the last non-empty line of s, for a one-line error.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
