package chaosrun

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/cliflag"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
	"github.com/rebound-go/rebound/mcp/chaosmcp"
)

// MCPFlags are the flags of "rebound chaos --mcp"; On is --mcp itself.
type MCPFlags struct {
	On                             *bool
	crashAfter, loseEvery          *int
	crashRate, hangRate, errorRate *float64
	progress                       *bool
	countFile                      *string
}

// The flags that belong to --mcp alone, and those --mcp refuses.
var (
	MCPOnly = []string{"crash-after", "crash-rate", "hang-rate", "error-rate", "progress", "lose-sessions-every", "count-file"}
	llmOnly = []string{"mode", "fail-rate", "retry-after", "profile", "cut-after", "key-rpm", "key-tpm", "key-window", "key-quota-exhausted", "prompt-cache", "cache-ttl"}
)

// DefineMCPFlags defines the flags of --mcp on fs, the flag set of
// "rebound chaos", which also has --seed, --slow and --addr.
func DefineMCPFlags(fs *flag.FlagSet) MCPFlags {
	return MCPFlags{
		On:         fs.Bool("mcp", false, "serve a flaky MCP server: over stdio, or streamable HTTP at /mcp with --addr"),
		crashAfter: fs.Int("crash-after", 0, "with --mcp, exit after every `N`th tool call has run, before it answers (0: never)"),
		crashRate:  fs.Float64("crash-rate", 0, "with --mcp, the `probability` that a tool call, having run, makes the process exit"),
		hangRate:   fs.Float64("hang-rate", 0, "with --mcp, the `probability` that a tool call never runs nor answers"),
		errorRate:  fs.Float64("error-rate", 0, "with --mcp, the `probability` that a tool call answers isError without running"),
		progress:   fs.Bool("progress", false, "with --mcp and --slow, send progress notifications during a slow call that asks for them"),
		loseEvery:  fs.Int("lose-sessions-every", 0, "with --mcp and --addr, forget every session at every `N`th tool call, which gets 404 (0: never)"),
		countFile:  fs.String("count-file", "", "with --mcp, append a line per tool run to `file`, synced, so runs are counted across crashes"),
	}
}

// RunMCP is "rebound chaos --mcp": it checks the flags (given names those
// the command line gave) and serves a chaosmcp.Server over stdio, or over
// HTTP if --addr was given. It returns the command's exit code: 2 for bad
// usage, with a one-line reason on stderr, else ServeMCP's.
func RunMCP(ctx context.Context, mf MCPFlags, given map[string]bool, seed uint64, slow time.Duration, addr string, stdin io.ReadCloser, stdout, stderr io.Writer) int {
	if err := mf.check(given, slow); err != nil {
		io.WriteString(stderr, "rebound chaos: "+err.Error()+"\n")
		return 2
	}
	if !given["slow"] {
		slow = 0
	}
	if !given["addr"] {
		addr = ""
	} else if _, err := serve.CheckAddr(addr); err != nil {
		io.WriteString(stderr, "rebound chaos: "+err.Error()+"\n")
		return 2
	}
	srv, err := chaosmcp.New(chaosmcp.Config{
		CrashAfter: *mf.crashAfter, CrashRate: *mf.crashRate, HangRate: *mf.hangRate, ErrorRate: *mf.errorRate,
		Slow: slow, Progress: *mf.progress, LoseSessionsEvery: *mf.loseEvery, CountFile: *mf.countFile, Seed: seed,
	})
	if err != nil {
		io.WriteString(stderr, "rebound chaos: "+err.Error()+"\n")
		return 1
	}
	return ServeMCP(ctx, srv, seed, addr, stdin, stdout, stderr)
}

// check refuses the flags of the chaos server's other modes, values out
// of range, and flags given without the one they need.
func (mf MCPFlags) check(given map[string]bool, slow time.Duration) error {
	if name := cliflag.FirstGiven(given, llmOnly...); name != "" {
		return fmt.Errorf("--%s does not apply to --mcp", name)
	}
	for _, err := range []error{
		cliflag.Int("crash-after", *mf.crashAfter, 0, math.MaxInt, "a number of calls, 0 for never"),
		cliflag.Float("crash-rate", *mf.crashRate, 0, 1, "a probability from 0 to 1"),
		cliflag.Float("hang-rate", *mf.hangRate, 0, 1, "a probability from 0 to 1"),
		cliflag.Float("error-rate", *mf.errorRate, 0, 1, "a probability from 0 to 1"),
		cliflag.Int("lose-sessions-every", *mf.loseEvery, 0, math.MaxInt, "a number of calls, 0 for never"),
	} {
		if err != nil {
			return err
		}
	}
	rates := *mf.crashRate + *mf.hangRate + *mf.errorRate
	switch {
	case rates > 1+1e-9: // a sum of decimals that is 1 may come out a little over
		return fmt.Errorf("--crash-rate, --hang-rate and --error-rate add up to %.4g, more than 1", rates)
	case given["slow"] && slow <= 0:
		return fmt.Errorf("--slow %v is not a positive duration", slow)
	case *mf.progress && !given["slow"]:
		return fmt.Errorf("--progress needs --slow: only a slow call sends progress")
	case given["lose-sessions-every"] && !given["addr"]:
		return fmt.Errorf("--lose-sessions-every needs --addr: over stdio there are no sessions")
	case given["count-file"] && *mf.countFile == "":
		return fmt.Errorf("--count-file is empty")
	}
	return nil
}
