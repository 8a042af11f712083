// Command rebound runs rebound's experiments and tools.
//
// Usage:
//
//	rebound analyze [--json] [--price-in USD --price-out USD] FILE...
//	                                    report where the retries in call logs went
//	rebound batch INPUT.jsonl --out OUTPUT.jsonl [flags]
//	                                    send a file of requests, resumably
//	rebound bench [--json] [--seed N]   reproduce the 429 article's experiments
//	rebound chaos [--mcp] [flags]       serve the fault-injecting chaos server, or a flaky MCP server
//	rebound mcp [flags] -- COMMAND [ARGS...] | --upstream URL
//	                                    keep an MCP server's tool calls alive through crashes
//	rebound proxy --upstream URL | --config FILE [flags]
//	                                    serve a retrying reverse proxy for LLM APIs
//	rebound sim [--scenario occ] [--json] [flags]
//	                                    simulate a scenario in virtual time
//	rebound help [COMMAND]              describe rebound, or a command and its flags
//	rebound version                     print the version rebound was built at
//
// With --json a command prints exactly one JSON object on stdout; without it,
// a table. Help that was asked for (help, -h, --help) goes to stdout;
// progress, logs and errors go to stderr. The exit code is 0 on success, 1
// on failure and 2 on bad usage, with a one-line reason.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"syscall"

	"github.com/rebound-go/rebound/cmd/rebound/internal/cliflag"
	"github.com/rebound-go/rebound/cmd/rebound/internal/version"
)

const usage = `usage: rebound <command> [flags]

commands:
  analyze read call logs (JSON lines) and report the retries wasted, by error
  batch   send a file of requests in the OpenAI Batch format, resuming where it stopped
  bench   reproduce the 429 article's retry experiments against the chaos server
  chaos   serve the fault-injecting chaos server (--mcp: a flaky MCP server)
  mcp     run an MCP server behind rebound: restarted when it dies, calls resent when safe
  proxy   serve a reverse proxy that retries, paces and breaks calls to LLM APIs
  sim     simulate a scenario (occ: Brooker's backoff experiment) in virtual time
  help    print this, or with a command's name that command's help
  version print the version and revision rebound was built from

"rebound help <command>" or "rebound <command> -h" describes a command's flags.
`

const versionUsage = `usage: rebound version

Print rebound's module version, the revision of the source it was built
from and whether that had changes not committed, when the build recorded
them, and the Go version. A build outside a module or a repository says
"(devel)".
`

func main() {
	ctx, stop := signalContext()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// signalContext returns a context that SIGINT or SIGTERM cancels. The
// first signal only cancels it (a command stops cleanly: the proxy drains);
// the signals have their default effect again before it is cancelled, so
// that a second one (Ctrl-C again) kills at once.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case <-signals:
		case <-ctx.Done():
		}
		signal.Stop(signals)
		cancel()
	}()
	return ctx, cancel
}

// command is a subcommand: it runs with its arguments and returns the exit
// code.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// commands returns the subcommands by name. A function rather than a
// variable, since runHelp, which one of them would be, refers to it.
func commands() map[string]command {
	return map[string]command{
		"analyze": runAnalyze,
		"batch":   runBatch,
		"bench":   runBench,
		"chaos":   runChaos,
		"mcp":     runMCP,
		"proxy":   runProxy,
		"sim":     runSim,
		"help":    runHelp,
		"version": runVersion,
	}
}

const commandNames = "analyze, batch, bench, chaos, mcp, proxy, sim, help or version"

// run dispatches to a subcommand and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		name = "help"
	case "-version", "--version":
		name = "version"
	}
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(stderr, "rebound: unknown command %q (want %s)\n", args[0], commandNames)
		return 2
	}
	return cmd(ctx, args[1:], stdout, withStdout(stderr, stdout))
}

// runHelp implements "rebound help [COMMAND]": the usage, or the help of
// COMMAND exactly as "rebound COMMAND -h" prints it, on stdout.
func runHelp(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0 || len(args) == 1 && slices.Contains([]string{"help", "-h", "-help", "--help"}, args[0]):
		fmt.Fprint(stdout, usage)
		return 0
	case len(args) > 1:
		fmt.Fprintf(stderr, "rebound help: unexpected argument %q\n", args[1])
		return 2
	}
	cmd, ok := commands()[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "rebound help: unknown command %q (want %s)\n", args[0], commandNames)
		return 2
	}
	return cmd(ctx, []string{"-h"}, stdout, withStdout(stderr, stdout))
}

// runVersion implements "rebound version".
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	if code, done := parseFlags(fs, args, versionUsage, withStdout(stderr, stdout)); done {
		return code
	}
	bi, ok := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, version.Line(bi, ok))
	return 0
}

// cmdStderr is a command's stderr that also carries its stdout, so that
// parseFlags, which is handed stderr alone, can print help that was asked
// for on stdout.
type cmdStderr struct {
	io.Writer
	stdout io.Writer
}

// withStdout returns stderr carrying stdout.
func withStdout(stderr, stdout io.Writer) io.Writer {
	if s, ok := stderr.(cmdStderr); ok {
		stderr = s.Writer
	}
	return cmdStderr{stderr, stdout}
}

// helpOutput returns where help that was asked for goes: the stdout that
// stderr carries, if it carries one.
func helpOutput(stderr io.Writer) io.Writer {
	if s, ok := stderr.(cmdStderr); ok {
		return s.stdout
	}
	return stderr
}

// parseFlags parses a subcommand's args. done says the command should
// return code at once: 0 after printing the help asked for with -h (on the
// stdout stderr carries, see withStdout), 2 after a one-line reason for
// bad usage on stderr. Subcommands take no positional arguments.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (code int, done bool) {
	rest, code, done := parseInterleaved(fs, args, usage, stderr)
	if !done && len(rest) > 0 {
		fmt.Fprintf(stderr, "rebound %s: unexpected argument %q\n", fs.Name(), rest[0])
		return 2, true
	}
	return code, done
}

// parseInterleaved is parseFlags for a command that also takes arguments,
// which may come before, between or after its flags, as
// "rebound analyze log.jsonl --json" invites; "--" ends the flags. It
// returns the arguments in order.
func parseInterleaved(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (rest []string, code int, done bool) {
	fs.SetOutput(io.Discard)
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			printHelp(fs, usage, helpOutput(stderr))
			return nil, 0, true
		case err != nil:
			fmt.Fprintf(stderr, "rebound %s: %v\n", fs.Name(), cliflag.Unknown(fs, err))
			return nil, 2, true
		}
		left := fs.Args()
		if len(left) == 0 {
			return rest, 0, false
		}
		if n := len(args) - len(left); n > 0 && args[n-1] == "--" {
			return append(rest, left...), 0, false
		}
		rest = append(rest, left[0])
		args = left[1:]
	}
}

// printHelp prints a command's usage and the flags of fs to w.
func printHelp(fs *flag.FlagSet, usage string, w io.Writer) {
	fmt.Fprint(w, usage)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}
