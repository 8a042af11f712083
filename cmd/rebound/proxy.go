package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/rebound-go/rebound/cmd/rebound/internal/mcprun"
	"github.com/rebound-go/rebound/cmd/rebound/internal/proxyrun"
)

// runProxy implements "rebound proxy".
func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	f := proxyrun.DefineFlags(fs)
	if code, done := parseFlags(fs, args, proxyrun.Usage, withStdout(stderr, stdout)); done {
		return code
	}
	c, err := f.Config()
	if err != nil {
		// A config with several mistakes names each on a line of its own.
		for line := range strings.SplitSeq(err.Error(), "\n") {
			fmt.Fprintf(stderr, "rebound proxy: %s\n", line)
		}
		return 2
	}
	c.MCPServer = mcprun.ProxyServer(stderr)
	return proxyrun.Run(ctx, c, stdout, stderr)
}
