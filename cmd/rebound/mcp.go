package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rebound-go/rebound/cmd/rebound/internal/mcprun"
)

// runMCP implements "rebound mcp".
func runMCP(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
	f := mcprun.DefineFlags(fs)
	flags, command, dashes := mcprun.CutDashes(args)
	if arg, ok := mcprun.FirstArgument(fs, flags); ok {
		fmt.Fprintf(stderr, "rebound mcp: unexpected argument %q: put the server's command after -- (rebound mcp [flags] -- COMMAND [ARGS...])\n", arg)
		return 2
	}
	if code, done := parseFlags(fs, flags, mcprun.Usage, withStdout(stderr, stdout)); done {
		return code
	}
	c, err := f.Config(fs, command, dashes)
	if err != nil {
		fmt.Fprintf(stderr, "rebound mcp: %v\n", err)
		return 2
	}
	return mcprun.Run(ctx, c, os.Stdin, stdout, rawStderr(stderr))
}

// rawStderr returns the stderr a command was handed, without the stdout
// it carries for help: a server's own stderr goes straight to it.
func rawStderr(stderr io.Writer) io.Writer {
	if s, ok := stderr.(cmdStderr); ok {
		return s.Writer
	}
	return stderr
}
