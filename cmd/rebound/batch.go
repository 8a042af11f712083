package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/rebound-go/rebound/batch"
	"github.com/rebound-go/rebound/cmd/rebound/internal/batchrun"
	"github.com/rebound-go/rebound/cmd/rebound/internal/cliflag"
	reboundpg "github.com/rebound-go/rebound/postgres"
)

func runBatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return runBatchStatus(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	var c batchrun.Config
	fs.StringVar(&c.Out, "out", "", "write the answers to `FILE` (required)")
	fs.StringVar(&c.Errors, "errors", "", "write the failures to `FILE` (default OUTPUT with .errors.jsonl for .jsonl)")
	fs.StringVar(&c.Journal, "journal", "", "journal `PATH` or postgres:// URL (default OUTPUT.journal)")
	fs.StringVar(&c.BaseURL, "base-url", "", "send to `URL` (default the dialect's provider)")
	fs.StringVar(&c.Dialect, "dialect", "openai", "the provider's `dialect`: openai, anthropic or gemini (how the key is sent)")
	fs.StringVar(&c.KeyEnv, "api-key-env", "", "read the key from the environment variable `NAME` (default by dialect)")
	fs.IntVar(&c.Concurrency, "concurrency", batch.DefaultConcurrency, "requests in flight, from 1 to 1024")
	fs.IntVar(&c.MaxAttempts, "max-attempts", 0, "attempts of each request, of every kind of failure, from 1 to 100 (default the policy's)")
	fs.StringVar(&c.PolicyFile, "policy", "", "retry policy as rebound's policy JSON in `FILE` (default the recommended one)")
	fs.Float64Var(&c.RPM, "rpm", 0, "requests per minute the provider allows (default: learnt from its headers)")
	fs.StringVar(&c.Redis, "redis", "", "share the rate limits with other processes on the Redis at `URL`")
	fs.StringVar(&c.BatchName, "batch-name", "", "name of the batch in a postgres journal (default the input's file name)")
	fs.StringVar(&c.Schema, "schema", "", "schema of a postgres journal's tables (default rebound)")
	fs.DurationVar(&c.Lease, "lease", 0, "how long a postgres worker holds a request it does not renew (default 30s)")
	fs.BoolVar(&c.RetryFailed, "retry-failed", false, "send again the requests that failed permanently in earlier runs")
	fs.BoolVar(&c.Strict, "strict", false, "send nothing if any input line is malformed")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	rest, code, done := parseInterleaved(fs, args, batchrun.Usage, withStdout(stderr, stdout))
	if done {
		return code
	}
	if err := checkBatchFlags(&c, rest); err != nil {
		fmt.Fprintf(stderr, "rebound batch: %v\n", err)
		return 2
	}
	c.Terminal = isTerminal(stderr)
	res, code := batchrun.Run(ctx, &c, stderr)
	if res == nil {
		return code
	}
	if *asJSON {
		if code := printJSON(stdout, stderr, res.Report); code != 0 {
			return code
		}
	} else {
		res.WriteTable(stdout)
	}
	return res.Finish(stderr)
}

// checkBatchFlags checks the arguments and the numbers among the flags,
// then c itself.
func checkBatchFlags(c *batchrun.Config, rest []string) error {
	switch {
	case len(rest) == 0:
		return fmt.Errorf("no input file (want rebound batch INPUT.jsonl --out OUTPUT.jsonl)")
	case len(rest) > 1:
		return fmt.Errorf("unexpected argument %q: one input file at a time", rest[1])
	case c.Out == "":
		return fmt.Errorf("--out is required: where to write the answers")
	}
	c.Input = rest[0]
	for _, err := range []error{
		cliflag.Int("concurrency", c.Concurrency, 1, 1024, "a whole number from 1 to 1024"),
		cliflag.Int("max-attempts", c.MaxAttempts, 0, 100, "a whole number from 1 to 100"),
		cliflag.Float("rpm", c.RPM, 0, 1e9, "a number from 0 (learn it) to 1e9"),
	} {
		if err != nil {
			return err
		}
	}
	if c.Lease != 0 && (c.Lease < time.Second || c.Lease > time.Hour) {
		return fmt.Errorf("--lease %v: want from 1s to 1h", c.Lease)
	}
	return c.Check()
}

func runBatchStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("batch status", flag.ContinueOnError)
	journal := fs.String("journal", "", "journal `PATH` or postgres:// URL (required)")
	name := fs.String("batch-name", "", "name of the batch in a postgres journal (required with one)")
	schema := fs.String("schema", "", "schema of a postgres journal's tables (default rebound)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	if code, done := parseFlags(fs, args, batchrun.StatusUsage, withStdout(stderr, stdout)); done {
		return code
	}
	switch {
	case *journal == "":
		fmt.Fprintln(stderr, "rebound batch status: --journal is required")
		return 2
	case batchrun.IsPostgres(*journal) && *name == "":
		fmt.Fprintln(stderr, "rebound batch status: --batch-name is required with a postgres journal")
		return 2
	}
	c, err := batchrun.Status(ctx, *journal, reboundpg.Config{Batch: *name, Schema: *schema})
	if err != nil {
		fmt.Fprintf(stderr, "rebound batch status: %v\n", err)
		return 1
	}
	if *asJSON {
		return printJSON(stdout, stderr, c)
	}
	fmt.Fprintf(stdout, "%d requests: %d succeeded, %d failed, %d failed permanently, %d in flight, %d not yet sent\n",
		c.Total, c.Succeeded, c.Failed, c.FailedPermanent, c.InFlight, c.Pending)
	return 0
}
