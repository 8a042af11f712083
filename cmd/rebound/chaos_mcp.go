package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/chaosrun"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
	"github.com/rebound-go/rebound/mcp/chaosmcp"
)

// chaosMCPFlags are the flags of "rebound chaos --mcp".
type chaosMCPFlags struct {
	on                             *bool
	crashAfter, loseEvery          *int
	crashRate, hangRate, errorRate *float64
	progress                       *bool
	countFile                      *string
}

// The flags that belong to --mcp alone, and those --mcp refuses.
var (
	chaosMCPOnly = []string{"crash-after", "crash-rate", "hang-rate", "error-rate", "progress", "lose-sessions-every", "count-file"}
	chaosLLMOnly = []string{"mode", "fail-rate", "retry-after", "profile", "cut-after"}
)

func defineChaosMCPFlags(fs *flag.FlagSet) chaosMCPFlags {
	return chaosMCPFlags{
		on:         fs.Bool("mcp", false, "serve a flaky MCP server: over stdio, or streamable HTTP at /mcp with --addr"),
		crashAfter: fs.Int("crash-after", 0, "with --mcp, exit after every `N`th tool call has run, before it answers (0: never)"),
		crashRate:  fs.Float64("crash-rate", 0, "with --mcp, the `probability` that a tool call, having run, makes the process exit"),
		hangRate:   fs.Float64("hang-rate", 0, "with --mcp, the `probability` that a tool call never runs nor answers"),
		errorRate:  fs.Float64("error-rate", 0, "with --mcp, the `probability` that a tool call answers isError without running"),
		progress:   fs.Bool("progress", false, "with --mcp and --slow, send progress notifications during a slow call that asks for them"),
		loseEvery:  fs.Int("lose-sessions-every", 0, "with --mcp and --addr, forget every session at every `N`th tool call, which gets 404 (0: never)"),
		countFile:  fs.String("count-file", "", "with --mcp, append a line per tool run to `file`, synced, so runs are counted across crashes"),
	}
}

// firstGiven returns the first of names given on the command line, or "".
func firstGiven(given map[string]bool, names []string) string {
	for _, n := range names {
		if given[n] {
			return n
		}
	}
	return ""
}

// runChaosMCP is "rebound chaos --mcp": it checks the flags and serves a
// chaosmcp.Server over stdio, or over HTTP if --addr was given.
func runChaosMCP(ctx context.Context, mf chaosMCPFlags, given map[string]bool, seed uint64, slow time.Duration, addr string, stdout, stderr io.Writer) int {
	usageErr := func(err error) int {
		io.WriteString(stderr, "rebound chaos: "+err.Error()+"\n")
		return 2
	}
	if name := firstGiven(given, chaosLLMOnly); name != "" {
		return usageErr(fmt.Errorf("--%s does not apply to --mcp", name))
	}
	rates := *mf.crashRate + *mf.hangRate + *mf.errorRate
	for _, err := range []error{
		intFlag("crash-after", *mf.crashAfter, 0, math.MaxInt, "a number of calls, 0 for never"),
		floatFlag("crash-rate", *mf.crashRate, 0, 1, "a probability from 0 to 1"),
		floatFlag("hang-rate", *mf.hangRate, 0, 1, "a probability from 0 to 1"),
		floatFlag("error-rate", *mf.errorRate, 0, 1, "a probability from 0 to 1"),
		intFlag("lose-sessions-every", *mf.loseEvery, 0, math.MaxInt, "a number of calls, 0 for never"),
	} {
		if err != nil {
			return usageErr(err)
		}
	}
	switch {
	case rates > 1+1e-9: // a sum of decimals that is 1 may come out a little over
		return usageErr(fmt.Errorf("--crash-rate, --hang-rate and --error-rate add up to %.4g, more than 1", rates))
	case given["slow"] && slow <= 0:
		return usageErr(fmt.Errorf("--slow %v is not a positive duration", slow))
	case *mf.progress && !given["slow"]:
		return usageErr(fmt.Errorf("--progress needs --slow: only a slow call sends progress"))
	case given["lose-sessions-every"] && !given["addr"]:
		return usageErr(fmt.Errorf("--lose-sessions-every needs --addr: over stdio there are no sessions"))
	case given["count-file"] && *mf.countFile == "":
		return usageErr(fmt.Errorf("--count-file is empty"))
	}
	if !given["slow"] {
		slow = 0
	}
	if !given["addr"] {
		addr = ""
	} else if _, err := serve.CheckAddr(addr); err != nil {
		return usageErr(err)
	}
	srv, err := chaosmcp.New(chaosmcp.Config{
		CrashAfter: *mf.crashAfter, CrashRate: *mf.crashRate, HangRate: *mf.hangRate, ErrorRate: *mf.errorRate,
		Slow: slow, Progress: *mf.progress, LoseSessionsEvery: *mf.loseEvery, CountFile: *mf.countFile, Seed: seed,
	})
	if err != nil {
		io.WriteString(stderr, "rebound chaos: "+err.Error()+"\n")
		return 1
	}
	return chaosrun.ServeMCP(ctx, srv, seed, addr, os.Stdin, stdout, stderr)
}
