package chaosrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
	"github.com/rebound-go/rebound/mcp/chaosmcp"
)

// MCPUsage is the part of the help of "rebound chaos" about --mcp.
const MCPUsage = `
With --mcp it serves a flaky MCP server instead, built on the official Go
SDK: over stdio (stdin and stdout are the protocol; everything else goes
to stderr), or with --addr over streamable HTTP at /mcp, where GET
/chaos/counts reports the runs by tool as JSON. Its tools keep a map of
keys to values: lookup (readOnlyHint), set (idempotentHint) and append
(neither: run twice, it appends twice). Faults are off unless asked for,
apply to tools/call, and are drawn from --seed, which is printed on
stderr: --crash-after N and --crash-rate P make the process exit with
code 3 after the call has run and before it answers; a call drawn by
--hang-rate P never runs nor answers; --slow D delays every call, with a
progress notification every tenth of D (at most a second apart) if
--progress is given and the call asked for progress; a call drawn by
--error-rate P answers isError without running; over HTTP,
--lose-sessions-every N makes every Nth call find its session forgotten,
answered 404 Not Found as by a restarted server, and SIGHUP makes every
session forgotten. The rates together may not pass 1. --count-file PATH
gets a JSON line per run, synced to disk before the call answers or
crashes, so that runs can be counted across crashes; a server started on
an existing file counts on from it.
`

// ServeMCP serves srv and returns the command's exit code: over stdio
// (addr empty) until the client closes stdin or ctx is done, or over
// streamable HTTP on addr (checked: see serve.CheckAddr), where SIGHUP
// makes it lose its sessions, until ctx is done. It prints the seed on
// stderr, and returns 0 after a clean stop, 1 if it could not serve.
func ServeMCP(ctx context.Context, srv *chaosmcp.Server, seed uint64, addr string, stdin io.ReadCloser, stdout, stderr io.Writer) int {
	defer srv.Close()
	fmt.Fprintf(stderr, "rebound chaos: MCP server, seed %d\n", seed)
	var err error
	if addr == "" {
		err = srv.Run(ctx, &mcp.IOTransport{Reader: stdin, Writer: nopCloser{stdout}})
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			err = nil
		}
	} else {
		err = serveMCPHTTP(ctx, srv, addr, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rebound chaos: %v\n", err)
		return 1
	}
	return 0
}

func serveMCPHTTP(ctx context.Context, srv *chaosmcp.Server, addr string, stdout, stderr io.Writer) error {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	hupCtx, stopHup := context.WithCancel(ctx)
	listening := make(chan struct{})
	go func() {
		defer close(listening)
		for {
			select {
			case <-hup:
				srv.LoseSessions()
				fmt.Fprintln(stderr, "rebound chaos: SIGHUP: every session lost")
			case <-hupCtx.Done():
				return
			}
		}
	}()
	defer func() { stopHup(); <-listening }()
	return serve.Run(ctx, serve.Config{
		Addr: addr,
		Server: &http.Server{
			Handler:           srv,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          log.New(stderr, "rebound chaos: ", 0),
		},
		Drain:  5 * time.Second,
		Stdout: stdout,
		// The sessions' event streams would hold the drain open.
		Stopping: srv.LoseSessions,
		Unfinished: func(err error) {
			fmt.Fprintf(stderr, "rebound chaos: shutdown: %v; closing open connections\n", err)
		},
	})
}

// nopCloser is stdout as the transport's writer: the command, not the
// session, owns it.
type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }
