package main

import (
	"context"
	"flag"
	"fmt"
	"io"

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
		fmt.Fprintf(stderr, "rebound proxy: %v\n", err)
		return 2
	}
	return proxyrun.Run(ctx, c, stdout, stderr)
}
