// Package mcprun runs "rebound mcp": one MCP server (a command over
// stdio, or a streamable HTTP endpoint) behind reboundmcp, which restarts
// it, replays the session and resends what is safe, served to the client
// over stdio (the default: what an agent that launches its servers
// expects) or over streamable HTTP behind internal/frontdoor.
//
// Over stdio the relay is reboundmcp.Serve between a newline-delimited
// connection on the command's standard input and output
// (reboundmcp.NewLineConn, read on Serve's goroutine) and the resilient
// connection: no goroutine per message and, over a stdio server, no
// hand-off between goroutines on a call's way; each message is decoded
// once and encoded once on each side. A line that is not JSON-RPC is
// answered with a parse error. Nothing but the protocol is written to
// standard output.
package mcprun

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rebound-go/rebound/internal/frontdoor"
	reboundmcp "github.com/rebound-go/rebound/mcp"
)

// Config is a run of "rebound mcp", as its flags ask for it.
type Config struct {
	// Command is the stdio server's command and arguments; Upstream,
	// when Command is empty, the streamable HTTP server's endpoint.
	Command  []string
	Upstream string
	// Addr, if set, is where to serve streamable HTTP at /mcp; empty
	// means the client speaks over standard input and output.
	Addr string
	// Door is who may call over HTTP; AdminToken opens /metrics to
	// requests from beyond the machine.
	Door       frontdoor.Options
	AdminToken frontdoor.AdminToken
	// HideEnv names environment variables the server's process does not
	// get: the one that holds the client tokens, which a tool that echoes
	// its environment would hand to any client.
	HideEnv []string
	// MaxSessions bounds the HTTP client sessions open at once (each
	// holds an upstream connection: a stdio server's process);
	// SessionTimeout ends a session that has had no request for that long.
	MaxSessions    int
	SessionTimeout time.Duration
	// Drain is how long HTTP requests in flight may finish once the
	// command is told to stop.
	Drain time.Duration
	// Options are reboundmcp's, from the flags; Run adds the logger
	// and, over HTTP, the metrics' observer.
	Options reboundmcp.Options
	// ConfigFile is the file Options.Tools were read from, which an HTTP
	// front re-reads at each SIGHUP for the sessions opened after it;
	// empty for none.
	ConfigFile string
	// LogLevel is the least level logged; Off logs nothing.
	LogLevel slog.Level
	LogOff   bool
}

// Run serves c until ctx is done or, over stdio, until the client closes
// standard input; the upstream is closed on the way out (a stdio
// server's process group ended, an HTTP session deleted). It returns the
// command's exit code: 0 after a clean stop, 1 if it could not serve, 2
// for bad usage (a reason in one line on stderr).
//
// SIGINT, SIGTERM and SIGHUP stay caught until every upstream is closed: a second
// signal (Ctrl-C twice) while a server that ignores SIGTERM is given its
// grace must not kill rebound before it has killed the server's group,
// which would be left running, an orphan, with nobody to kill it.
//
// Over stdio SIGHUP (the terminal closed) stops it as SIGTERM does: the
// server's group, a process group of its own, gets no SIGHUP from the
// terminal. Over HTTP SIGHUP stops nothing, as for the proxy: the tool
// rules of --config are re-read for the sessions opened after it, or, with
// no --config, the log says it is ignored.
func Run(ctx context.Context, c Config, stdin io.ReadCloser, stdout, stderr io.Writer) int {
	release := holdSignals()
	defer release()
	opts := c.Options
	if !c.LogOff {
		opts.Logger = slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	}
	up, err := c.server(stderr).upstream()
	if err != nil {
		fmt.Fprintf(stderr, "rebound mcp: %v\n", err)
		return 2
	}
	if c.Addr != "" {
		return runHTTP(ctx, c, up, opts, stdout, stderr, release)
	}
	ctx, stopHUP := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stopHUP()
	client := reboundmcp.NewLineConn(pollable(stdin), nopCloser{stdout})
	if err := reboundmcp.Serve(ctx, client, reboundmcp.New(up, opts)); err != nil {
		fmt.Fprintf(stderr, "rebound mcp: %v\n", err)
		return 1
	}
	return 0
}

// holdSignals keeps SIGINT, SIGTERM and SIGHUP from having their default effect
// (death) until release is called; whoever else listens for them still
// hears them.
func holdSignals() (release func()) {
	held := make(chan os.Signal, 1)
	signal.Notify(held, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	return sync.OnceFunc(func() { signal.Stop(held) })
}

// server returns the server c names.
func (c Config) server(stderr io.Writer) Server {
	return Server{Command: c.Command, HideEnv: c.HideEnv, Upstream: c.Upstream, Stderr: stderr}
}

// upstream returns the upstream of s; a command that cannot be found is
// bad usage.
func (s Server) upstream() (reboundmcp.Upstream, error) {
	if len(s.Command) == 0 {
		var client *http.Client
		if len(s.Header) > 0 {
			client = &http.Client{Transport: headers{s.Header, http.DefaultTransport}}
		}
		return reboundmcp.HTTP(s.Upstream, client), nil
	}
	// LookPath, unlike exec.Command, also checks a path given with a
	// slash: one that is missing or not executable would otherwise be
	// started again and again, each start failing.
	path := s.Command[0]
	if s.Env != nil && !strings.Contains(path, "/") {
		// The server's own PATH finds its command, as it would in a shell.
		path = lookPathIn(path, s.Env)
	}
	if _, err := exec.LookPath(path); err != nil {
		return reboundmcp.Upstream{}, fmt.Errorf("server command: %v", err)
	}
	cmd := exec.Command(path, s.Command[1:]...)
	if cmd.Err != nil {
		return reboundmcp.Upstream{}, fmt.Errorf("server command: %v", cmd.Err)
	}
	cmd.Stderr = s.Stderr // the server's own logs, beside rebound's
	switch {
	case s.Env != nil:
		cmd.Env = s.Env
	case len(s.HideEnv) > 0:
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
			name, _, _ := strings.Cut(kv, "=")
			return slices.Contains(s.HideEnv, name)
		})
	}
	return reboundmcp.Command(cmd), nil
}

// lookPathIn returns the file name finds in the PATH of env, or name as
// it is when none does.
func lookPathIn(name string, env []string) string {
	for _, kv := range env {
		if dirs, ok := strings.CutPrefix(kv, "PATH="); ok {
			for dir := range strings.SplitSeq(dirs, string(os.PathListSeparator)) {
				if p := filepath.Join(dir, name); dir != "" && isExecutable(p) {
					return p
				}
			}
		}
	}
	return name
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// headers sends its header with every request of an HTTP upstream's.
type headers struct {
	h    http.Header
	next http.RoundTripper
}

func (t headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.next.RoundTrip(r)
}

// pollable returns stdin as a file the runtime polls when it is a pipe or
// a socket (as an agent that starts its servers gives it), so that
// closing it ends a read in progress: the client's messages are then
// read on Serve's own goroutine, with no goroutine of the SDK's to hand
// each one over, and Serve still ends at once on a signal. Anything else
// (a terminal, a file) is read as it is.
func pollable(stdin io.ReadCloser) io.ReadCloser {
	f, ok := stdin.(*os.File)
	if !ok {
		return stdin
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return stdin
	}
	var dup int
	raw.Control(func(fd uintptr) {
		var st syscall.Stat_t
		dup = -1
		if syscall.Fstat(int(fd), &st) != nil {
			return
		}
		if kind := st.Mode & syscall.S_IFMT; kind != syscall.S_IFIFO && kind != syscall.S_IFSOCK {
			return
		}
		if d, err := syscall.Dup(int(fd)); err == nil {
			syscall.CloseOnExec(d)
			dup = d
		}
	})
	if dup < 0 {
		return stdin
	}
	if err := syscall.SetNonblock(dup, true); err != nil {
		syscall.Close(dup)
		return stdin
	}
	return os.NewFile(uintptr(dup), f.Name())
}

// nopCloser is standard output as the SDK's connection writes to it:
// closing the connection leaves it open, for whatever is still said on
// stderr.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
