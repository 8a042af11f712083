// Command rebound runs rebound's experiments and tools.
//
// Usage:
//
//	rebound analyze [--json] [--price-in USD --price-out USD] FILE...
//	                                    report where the retries in call logs went
//	rebound bench [--json] [--seed N]   reproduce the seed article's experiments
//	rebound chaos [flags]               serve the fault-injecting chaos server
//	rebound sim [--scenario occ] [--json] [flags]
//	                                    simulate a scenario in virtual time
//
// With --json a command prints exactly one JSON object on stdout; without it,
// a table. Progress and logs go to stderr. The exit code is 0 on success, 1
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
	"syscall"
)

const usage = `usage: rebound <command> [flags]

commands:
  analyze read call logs (JSON lines) and report the retries wasted, by error
  bench   reproduce the seed article's retry experiments against the chaos server
  chaos   serve the fault-injecting chaos server
  sim     simulate a scenario (occ: Brooker's backoff experiment) in virtual time

"rebound <command> -h" describes a command's flags.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "analyze":
		return runAnalyze(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "chaos":
		return runChaos(ctx, args[1:], stdout, stderr)
	case "sim":
		return runSim(ctx, args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "rebound: unknown command %q (want analyze, bench, chaos or sim)\n", args[0])
	return 2
}

// parseFlags parses a subcommand's args. done says the command should
// return code at once: 0 after printing the help asked for with -h, 2 after
// a one-line reason for bad usage. Subcommands take no positional
// arguments.
func parseFlags(fs *flag.FlagSet, args []string, usage string, stderr io.Writer) (code int, done bool) {
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		fs.SetOutput(stderr)
		fs.PrintDefaults()
		return 0, true
	case err != nil:
		fmt.Fprintf(stderr, "rebound %s: %v\n", fs.Name(), err)
		return 2, true
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "rebound %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return 2, true
	}
	return 0, false
}
