package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/rebound-go/rebound/cmd/rebound/internal/analyze"
)

// analyzeStdin is what FILE - reads; tests replace it.
var analyzeStdin io.Reader = os.Stdin

func runAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("analyze", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	var o analyze.Options
	fs.Float64Var(&o.PriceIn, "price-in", 0, "US `dollars` per million input tokens, for calls that log tokens but no cost")
	fs.Float64Var(&o.PriceOut, "price-out", 0, "US `dollars` per million output tokens")
	cacheRead := fs.Float64("price-cache-read", 0, "US `dollars` per million input tokens read from the provider's cache (default: --price-in)")
	cacheWrite := fs.Float64("price-cache-write", 0, "US `dollars` per million input tokens written into the provider's cache (default: --price-in)")
	generate := fs.Int("generate", 0, "write `N` synthetic log lines to stdout instead of analysing")
	seed := fs.Uint64("seed", 1, "seed of --generate")
	runCap := fs.Float64("run-cap", 0, "the cap in US `dollars` of runs whose calls log none")
	tenantCap := fs.Float64("tenant-cap", 0, "the cap in US `dollars` of tenants whose calls log none")
	files, code, done := parseInterleaved(fs, args, analyze.Usage, withStdout(stderr, stdout))
	if done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	switch {
	case set["generate"] && *generate <= 0:
		err = errors.New("--generate wants a positive number of lines")
	case set["generate"] && len(files) > 0:
		err = errors.New("--generate takes no files")
	case set["generate"] && len(set) > 1 && !(len(set) == 2 && set["seed"]):
		err = errors.New("--generate takes no flag but --seed")
	case set["generate"]:
		return analyzeGenerate(stdout, stderr, *generate, *seed)
	case set["seed"]:
		err = errors.New("--seed goes with --generate")
	case (set["price-cache-read"] || set["price-cache-write"]) && !set["price-in"]:
		err = errors.New("--price-cache-read and --price-cache-write go with --price-in")
	case len(files) == 0:
		err = errors.New("no files to read (- reads stdin)")
	default:
		o.Priced = set["price-in"] || set["price-out"]
		if set["price-cache-read"] {
			o.PriceCacheRead = cacheRead
		}
		if set["price-cache-write"] {
			o.PriceCacheWrite = cacheWrite
		}
		err = analyzeCaps(&o, set, *runCap, *tenantCap)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rebound analyze: %v\n", err)
		return 2
	}
	return analyzeFiles(ctx, analyze.New(o), files, *asJSON, stdout, stderr)
}

// analyzeGenerate writes n synthetic log lines of seed to stdout.
func analyzeGenerate(stdout, stderr io.Writer, n int, seed uint64) int {
	if err := analyze.Generate(stdout, n, seed); err != nil {
		fmt.Fprintf(stderr, "rebound analyze: %v\n", err)
		return 1
	}
	return 0
}

// analyzeCaps checks o's prices, and sets its caps to those the flags
// given (set) name.
func analyzeCaps(o *analyze.Options, set map[string]bool, runCap, tenantCap float64) error {
	for _, p := range []struct {
		flag  string
		price *float64 // nil: not given
	}{{"--price-in", &o.PriceIn}, {"--price-out", &o.PriceOut}, {"--price-cache-read", o.PriceCacheRead}, {"--price-cache-write", o.PriceCacheWrite}} {
		if p.price == nil {
			continue
		}
		// NaN fails both comparisons; ±Inf the one it is beyond.
		if !(*p.price >= 0 && *p.price <= analyze.MaxPrice) {
			return fmt.Errorf("%s %v is not a price: want US dollars per million tokens, from 0 to %s",
				p.flag, *p.price, strconv.FormatFloat(analyze.MaxPrice, 'f', -1, 64))
		}
	}
	for _, c := range []struct {
		flag  string
		usd   float64
		field **float64
	}{{"run-cap", runCap, &o.RunCapUSD}, {"tenant-cap", tenantCap, &o.TenantCapUSD}} {
		if !set[c.flag] {
			continue
		}
		if !(c.usd >= 0 && c.usd <= analyze.MaxCost) {
			return fmt.Errorf("--%s %v is not a cap: want US dollars, from 0 to %s",
				c.flag, c.usd, strconv.FormatFloat(analyze.MaxCost, 'f', -1, 64))
		}
		*c.field = &c.usd
	}
	return nil
}

// analyzeFiles reads files into a and prints its report.
func analyzeFiles(ctx context.Context, a *analyze.Analyzer, files []string, asJSON bool, stdout, stderr io.Writer) int {
	var read []analyze.File
	for _, name := range files {
		f, err := a.ReadFile(ctx, name, analyzeStdin)
		read = append(read, f)
		switch {
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			analyze.WriteMalformed(stderr, read)
			fmt.Fprintf(stderr, "rebound analyze: interrupted in %s after %d lines\n", name, f.Lines)
			return 1
		case err != nil:
			analyze.WriteMalformed(stderr, read)
			fmt.Fprintf(stderr, "rebound analyze: %v\n", err)
			return 1
		}
	}
	r := a.Report()
	if r.Calls == 0 {
		// Nothing to report is a failure, said in one line: an empty or
		// binary file, or the wrong file, is a likelier cause than a
		// month without a single call.
		fmt.Fprintf(stderr, "rebound analyze: no calls in %s\n", r.NoCalls())
		return 1
	}
	analyze.WriteMalformed(stderr, read)
	if asJSON {
		return printJSON(stdout, stderr, r)
	}
	r.WriteTable(stdout)
	return 0
}
