package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cmd/rebound/internal/chaosrun"
	"github.com/rebound-go/rebound/cmd/rebound/internal/cliflag"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
)

// runChaos implements "rebound chaos". It serves a chaos.Server until ctx is
// done and returns the exit code: 0 after a clean stop or -h, 1 if it cannot
// listen or serve, 2 for bad usage.
func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8787", "listen on `host:port` (port 0 picks a free port)")
	mode := fs.String("mode", chaos.ModeRandom, "default `mode` of requests that name none")
	seed := fs.Uint64("seed", 1, "seed of the outcome sequence of random, stream-cut and lost-reply mode, of text mode's answers, and of --mcp's faults")
	failRate := fs.Float64("fail-rate", 0.35, "failure probability in random, stream-cut and lost-reply mode, in (0, 1]")
	retryAfter := fs.Int("retry-after", 1, "wait hint `seconds` sent in retryafter mode, at most a year (31536000); if given, with every failure")
	slow := fs.Duration("slow", time.Second, "response `delay` in slow mode and of late replies in lost-reply mode; with --mcp, of every tool call (none unless given)")
	profile := fs.String("profile", chaos.ProfilePlain, "answer in the wire format of `profile` (plain, openai, anthropic, gemini, azure, bedrock, local)")
	cutAfter := fs.Int("cut-after", 0, "`pieces` of text a breaking stream sends before it breaks, in stream-cut mode")
	mf := chaosrun.DefineMCPFlags(fs)
	kf := chaosrun.DefineKeyFlags(fs)
	cf := chaosrun.DefineCacheFlags(fs)

	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "rebound chaos: "+format+"\n", a...)
		return 2
	}
	if code, done := parseFlags(fs, args, chaosrun.Usage+chaosrun.KeyUsage+chaosrun.CacheUsage+chaosrun.MCPUsage+"\nflags:\n", withStdout(stderr, stdout)); done {
		return code
	}
	given := cliflag.Given(fs)
	if *mf.On {
		return chaosrun.RunMCP(ctx, mf, given, *seed, *slow, *addr, os.Stdin, stdout, stderr)
	}
	if name := cliflag.FirstGiven(given, chaosrun.MCPOnly...); name != "" {
		return usageErr("--%s applies to --mcp only", name)
	}
	// An explicit --retry-after asks for a wait hint with every failure.
	hintAll := given["retry-after"]
	// chaos.Config reads zero as "use the default"; on the command line a
	// zero would be a surprise either way, so it is refused.
	switch {
	case math.IsNaN(*failRate) || *failRate <= 0 || *failRate > 1:
		return usageErr("--fail-rate %v outside (0, 1] (use --mode ok for no failures)", *failRate)
	case *retryAfter < 1:
		return usageErr("--retry-after %d is not a positive number of seconds", *retryAfter)
	// Checked in seconds: multiplied into a Duration first, it would wrap.
	case *retryAfter > int(chaos.MaxRetryAfter/time.Second):
		return usageErr("--retry-after %d is beyond a year (want 1 to %d seconds)", *retryAfter, chaos.MaxRetryAfter/time.Second)
	case *slow <= 0:
		return usageErr("--slow %v is not a positive duration", *slow)
	case *cutAfter < 0:
		return usageErr("--cut-after %d is negative", *cutAfter)
	}
	cfg := chaos.Config{
		Mode:             *mode,
		FailRate:         *failRate,
		Seed:             *seed,
		RetryAfter:       time.Duration(*retryAfter) * time.Second,
		SlowDelay:        *slow,
		Profile:          *profile,
		HintEveryFailure: hintAll,
		CutAfter:         *cutAfter,
	}
	if err := kf.Set(&cfg); err != nil {
		return usageErr("%v", err)
	}
	if err := cf.Set(&cfg, given); err != nil {
		return usageErr("%v", err)
	}
	srv, err := chaos.New(cfg)
	if err != nil {
		return usageErr("%s", strings.TrimPrefix(err.Error(), "chaos: "))
	}

	// An address that is not host:port is bad usage; one that cannot be
	// had (a port in use) is a failure.
	if _, err := serve.CheckAddr(*addr); err != nil {
		return usageErr("%v", err)
	}
	return chaosrun.Serve(ctx, srv, *addr, stdout, stderr)
}
