package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/rebound-go/rebound/cmd/rebound/internal/analyze"
)

const analyzeUsage = `usage: rebound analyze [--json] [--price-in USD --price-out USD]
                       [--run-cap USD] [--tenant-cap USD] FILE...
       rebound analyze --generate N [--seed S]

Read an agent's call logs and report where its retries went: calls grouped
by the error they met (status, error type and code, verdict kind), how many
were retried, how many a retry saved, the attempts and dollars wasted, and
what to do about each kind. Rows are sorted by wasted dollars, then calls.
Retries spent on errors that can never succeed (permanent, quota exhausted,
context overflow) are counted apart. FILE - is stdin. Flags may come before
or after the files.

Each line is a JSON object, in either schema, mixed freely:

  rebound's own log: records with "msg":"rebound.call", one per call
  ("target", "attempts", "succeeded", and on failure "kind", "status",
  "error_type", "error_code", "reason"), and any key of the simple schema
  or of caps the logger adds; other records are skipped.

  the simple schema, for other tools' logs: one object per call, without
  "msg":
    "succeeded"      bool, required: it identifies the schema
    "status"         int: the HTTP status of the error the call met
                     (0 or absent: none, or a transport error)
    "error_type", "error_code"   strings, as the provider sent them
    "retried"        bool
    "attempts"       int; absent: 2 if retried, else 1
    "input_tokens"   int, of one attempt
    "output_tokens"  int, of the answer
    "cost"           number, US dollars for the whole call (optional)
    "reason"         string, as rebound logs it (optional)
    "target" or "model"          optional

  and, in either schema, optional spend caps:
    "run", "tenant"  strings: the run and the tenant the call was for
    "run_cap_usd"    number >= 0: the run's cap in US dollars
    "tenant_cap_usd" number >= 0: the tenant's cap in US dollars
  A call that gave up with "reason":"refused by the guard" was refused by
  a cap.

A call's cost is its "cost"; else, with --price-in and --price-out, input
tokens × attempts × price-in plus, if it succeeded, output tokens ×
price-out; else unknown, and dollar figures cover only the calls priced.

When calls name runs or tenants, a table of runs and one of tenants
list, for each, its calls, those refused by a cap, its spend (the cost
of its calls whose cost is known), its cap (the largest its calls
logged, else --run-cap or --tenant-cap, else unknown), spend as a share
of the cap, and whether it passed the cap: those that passed or came
nearest their caps first, the first 20 of each. At most 10000 runs, and
as many tenants, are kept; the calls of further ones are counted
together as other runs (tenants).

Malformed lines (not a JSON object, a known key of the wrong type, a
negative cost or cap, longer than 1 MiB) are counted, reported on stderr
one line per file, and skipped. If not one line is a call (an empty or
binary file, say), the command says so on stderr in one line and exits 1.

Prices must lie between 0 and 1000000 dollars per million tokens; caps,
logged or given, between 0 and 1000000000 dollars.

--json prints one object with these keys:

  files      [{name, lines, calls, malformed, skipped, malformed_lines}]
             one per input; malformed_lines holds the first few
             malformed lines' numbers, from 1
  lines      lines read: calls + malformed + skipped
  calls, malformed, skipped
  totals     {calls, succeeded, success_rate, attempts, retries,
             calls_retried, retry_rate, succeeded_after_retry,
             wasted_attempts, priced_calls, cost_usd, wasted_usd,
             retry_cost_usd, cost_per_success_usd, futile_retries,
             futile_retry_cost_usd}
  rows       [{group, status, error_type, error_code, kind, calls,
             attempts, retries, calls_retried, succeeded,
             succeeded_after_retry, success_rate, wasted_attempts,
             priced_calls, cost_usd, wasted_usd, retry_cost_usd,
             futile, recommendation}]
             by wasted_usd, then calls, most first
  runs       [{name, calls, refused, priced_calls, spend_usd, cap_usd,
             share_of_cap, passed_cap}]
             every run the calls named, those that passed or came
             nearest their caps first; left out when no call names one
  tenants    the same, of tenants
  other_runs, other_tenants   {calls, refused, priced_calls, spend_usd}
             the calls of runs (tenants) past the first 10000, counted
             together; left out when there are none

retries is attempts - calls; calls_retried counts the calls with more
than one attempt; retry_rate is calls_retried / calls; retry_cost_usd is
what the attempts after each call's first cost; cost_per_success_usd is
cost_usd over the priced calls that succeeded; futile_retries and
futile_retry_cost_usd are the retries spent, and what they cost, on
errors that can never succeed. Dollar fields are null when no call's cost
is known; error_type, error_code and kind are left out when empty.
refused counts the calls refused by a cap; spend_usd is the cost of the
priced_calls; cap_usd is null when no cap is known; share_of_cap is
spend_usd / cap_usd, null when either is unknown or the cap is 0;
passed_cap is spend_usd > cap_usd.

--generate N writes N synthetic log lines in both schemas to stdout, the
same for the same --seed, to try the command on or to measure it.

flags:
`

// analyzeStdin is what FILE - reads; tests replace it.
var analyzeStdin io.Reader = os.Stdin

func runAnalyze(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("analyze", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	priceIn := fs.Float64("price-in", 0, "US `dollars` per million input tokens, for calls that log tokens but no cost")
	priceOut := fs.Float64("price-out", 0, "US `dollars` per million output tokens")
	generate := fs.Int("generate", 0, "write `N` synthetic log lines to stdout instead of analysing")
	seed := fs.Uint64("seed", 1, "seed of --generate")
	runCap := fs.Float64("run-cap", 0, "the cap in US `dollars` of runs whose calls log none")
	tenantCap := fs.Float64("tenant-cap", 0, "the cap in US `dollars` of tenants whose calls log none")
	files, code, done := parseInterleaved(fs, args, analyzeUsage, withStdout(stderr, stdout))
	if done {
		return code
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	if set["generate"] {
		switch {
		case *generate <= 0:
			return analyzeBadUsage(stderr, "--generate wants a positive number of lines")
		case len(files) > 0:
			return analyzeBadUsage(stderr, "--generate takes no files")
		case set["json"] || set["price-in"] || set["price-out"] || set["run-cap"] || set["tenant-cap"]:
			return analyzeBadUsage(stderr, "--generate takes no flag but --seed")
		}
		if err := analyze.Generate(stdout, *generate, *seed); err != nil {
			fmt.Fprintf(stderr, "rebound analyze: %v\n", err)
			return 1
		}
		return 0
	}
	switch {
	case set["seed"]:
		return analyzeBadUsage(stderr, "--seed goes with --generate")
	case len(files) == 0:
		return analyzeBadUsage(stderr, "no files to read (- reads stdin)")
	}
	for _, p := range []struct {
		flag  string
		price float64
	}{{"--price-in", *priceIn}, {"--price-out", *priceOut}} {
		// NaN fails both comparisons; ±Inf the one it is beyond.
		if !(p.price >= 0 && p.price <= analyze.MaxPrice) {
			return analyzeBadUsage(stderr, fmt.Sprintf("%s %v is not a price: want US dollars per million tokens, from 0 to %s",
				p.flag, p.price, strconv.FormatFloat(analyze.MaxPrice, 'f', -1, 64)))
		}
	}

	opts := analyze.Options{Priced: set["price-in"] || set["price-out"], PriceIn: *priceIn, PriceOut: *priceOut}
	for _, c := range []struct {
		flag  string
		usd   *float64
		field **float64
	}{{"run-cap", runCap, &opts.RunCapUSD}, {"tenant-cap", tenantCap, &opts.TenantCapUSD}} {
		if !set[c.flag] {
			continue
		}
		if !(*c.usd >= 0 && *c.usd <= analyze.MaxCost) {
			return analyzeBadUsage(stderr, fmt.Sprintf("--%s %v is not a cap: want US dollars, from 0 to %s",
				c.flag, *c.usd, strconv.FormatFloat(analyze.MaxCost, 'f', -1, 64)))
		}
		*c.field = c.usd
	}
	a := analyze.New(opts)
	var read []analyze.File
	for _, name := range files {
		f, err := analyzeFile(ctx, a, name)
		read = append(read, f)
		switch {
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			analyzeMalformed(stderr, read)
			fmt.Fprintf(stderr, "rebound analyze: interrupted in %s after %d lines\n", name, f.Lines)
			return 1
		case err != nil:
			analyzeMalformed(stderr, read)
			fmt.Fprintf(stderr, "rebound analyze: %v\n", err)
			return 1
		}
	}
	r := a.Report()
	if r.Calls == 0 {
		// Nothing to report is a failure, said in one line: an empty or
		// binary file, or the wrong file, is a likelier cause than a
		// month without a single call.
		fmt.Fprintf(stderr, "rebound analyze: no calls in %s\n", analyzeNothing(&r))
		return 1
	}
	analyzeMalformed(stderr, read)
	if *asJSON {
		return printJSON(stdout, stderr, r)
	}
	printAnalyze(stdout, &r)
	printSpend(stdout, "run", "runs", r.Runs, r.OtherRuns)
	printSpend(stdout, "tenant", "tenants", r.Tenants, r.OtherTenants)
	return 0
}

// analyzeMalformed reports on stderr, one line per input, the malformed
// lines skipped in the inputs read.
func analyzeMalformed(stderr io.Writer, read []analyze.File) {
	for _, f := range read {
		if f.Malformed > 0 {
			fmt.Fprintf(stderr, "rebound analyze: %s: %d of %d lines malformed (%s)\n",
				f.Name, f.Malformed, f.Lines, analyzeLineNumbers(&f))
		}
	}
}

// analyzeLineNumbers lists the malformed lines f kept: "line 2, 4, …".
func analyzeLineNumbers(f *analyze.File) string {
	nums := make([]string, len(f.MalformedLines))
	for i, n := range f.MalformedLines {
		nums[i] = strconv.FormatInt(n, 10)
	}
	if f.Malformed > int64(len(nums)) {
		nums = append(nums, "…")
	}
	return "line " + strings.Join(nums, ", ")
}

// analyzeNothing says what the inputs of r, in which there is not one
// call, held instead.
func analyzeNothing(r *analyze.Report) string {
	where := fmt.Sprintf("%d files", len(r.Files))
	if len(r.Files) == 1 {
		where = r.Files[0].Name
	}
	switch {
	case r.Lines == 0 && len(r.Files) == 1:
		return where + ": it is empty"
	case r.Lines == 0:
		return where + ": they are empty"
	case len(r.Files) == 1 && r.Malformed > 0:
		f := &r.Files[0]
		return fmt.Sprintf("%s: %d lines, %d malformed (%s), %d skipped", where, f.Lines, f.Malformed, analyzeLineNumbers(f), f.Skipped)
	}
	return fmt.Sprintf("%s: %d lines, %d malformed, %d skipped", where, r.Lines, r.Malformed, r.Skipped)
}

// analyzeFile reads one file (or stdin, for "-") into a.
func analyzeFile(ctx context.Context, a *analyze.Analyzer, name string) (analyze.File, error) {
	if name == "-" {
		return a.Read(ctx, name, analyzeStdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return analyze.File{}, err
	}
	defer f.Close()
	file, err := a.Read(ctx, name, f)
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("%s: %w", name, err)
	}
	return file, err
}

func analyzeBadUsage(stderr io.Writer, reason string) int {
	fmt.Fprintf(stderr, "rebound analyze: %s\n", reason)
	return 2
}

// printAnalyze prints r as a table and a summary.
func printAnalyze(w io.Writer, r *analyze.Report) {
	t := &r.Totals
	fmt.Fprintf(w, "%d %s, %d lines: %d calls, %d skipped, %d malformed\n\n",
		len(r.Files), analyzePlural(len(r.Files), "file", "files"), r.Lines, r.Calls, r.Skipped, r.Malformed)
	if t.Calls == 0 {
		fmt.Fprintln(w, "no calls")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "group\tkind\tcalls\tattempts\tretries\tretried\tok after retry\tsuccess\twasted attempts\twasted $\trecommendation")
	for _, row := range r.Rows {
		kind := row.Kind
		if kind == "" {
			kind = "-"
		}
		rec := row.Recommendation
		if rec == "" {
			rec = "-"
		}
		if row.Futile {
			rec = "! " + rec
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%.1f%%\t%d\t%s\t%s\n", row.Group, kind, row.Calls,
			row.Attempts, row.Retries, row.CallsRetried, row.SucceededAfterRetry, 100*row.SuccessRate,
			row.WastedAttempts, analyzeUSD(row.WastedUSD), rec)
	}
	tw.Flush()

	fmt.Fprintf(w, "\ncalls %d: %.1f%% succeeded; %d (%.1f%%) needed a retry, %d succeeded after one; %d retries, %d attempts wasted\n",
		t.Calls, 100*t.SuccessRate, t.CallsRetried, 100*t.RetryRate, t.SucceededAfterRetry, t.Retries, t.WastedAttempts)
	if t.CostUSD != nil {
		known := ""
		if t.PricedCalls < t.Calls {
			known = fmt.Sprintf(" (known for %d of %d calls)", t.PricedCalls, t.Calls)
		}
		wastedShare := 0.0
		if *t.CostUSD > 0 {
			wastedShare = 100 * *t.WastedUSD / *t.CostUSD
		}
		fmt.Fprintf(w, "cost %s%s, wasted %s (%.1f%%), %s per successful call\n",
			analyzeUSD(t.CostUSD), known, analyzeUSD(t.WastedUSD), wastedShare, analyzeUSD(t.CostPerSuccessUSD))
	} else {
		fmt.Fprintln(w, "cost unknown: no call logs a cost, nor tokens to price with --price-in and --price-out")
	}
	if t.FutileRetries == 0 {
		return
	}
	fee := ""
	if t.FutileRetryCostUSD != nil {
		fee = ", " + analyzeUSD(t.FutileRetryCostUSD)
	}
	fmt.Fprintf(w, "retries spent on errors that can never succeed: %d%s\n", t.FutileRetries, fee)
	for _, row := range r.Rows {
		if !row.Futile {
			continue
		}
		waste := fmt.Sprintf("%d attempts wasted", row.WastedAttempts)
		if row.WastedUSD != nil {
			waste = analyzeUSD(row.WastedUSD) + " wasted"
		}
		fmt.Fprintf(w, "  %s: %d calls, %d retries, %s; %s\n", row.Group, row.Calls, row.Retries, waste, row.Recommendation)
	}
}

// spendShown is how many runs, and how many tenants, the table lists.
const spendShown = 20

// printSpend prints the spend of the runs or tenants in spends against
// their caps, the first spendShown of them, and the calls of the others
// past the analyzer's bound; nothing if there are none.
func printSpend(w io.Writer, one, many string, spends []analyze.Spend, other *analyze.OtherSpend) {
	if len(spends) == 0 {
		return
	}
	var passed, refused int
	for _, s := range spends {
		if s.PassedCap {
			passed++
		}
		if s.Refused > 0 {
			refused++
		}
	}
	fmt.Fprintf(w, "\n%s: %d; %d passed %s cap, %d had calls refused by a cap\n",
		many, len(spends), passed, analyzePlural(passed, "its", "their"), refused)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tcalls\trefused\tspend\tcap\tof cap\tpassed\n", one)
	for _, s := range spends[:min(len(spends), spendShown)] {
		share, verdict := "-", "-"
		if s.ShareOfCap != nil {
			share = fmt.Sprintf("%.1f%%", 100**s.ShareOfCap)
		}
		switch {
		case s.PassedCap:
			verdict = "! yes"
		case s.CapUSD != nil && s.SpendUSD != nil:
			verdict = "no"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", s.Name, s.Calls, s.Refused,
			analyzeUSD(s.SpendUSD), analyzeUSD(s.CapUSD), share, verdict)
	}
	tw.Flush()
	if rest := len(spends) - spendShown; rest > 0 {
		fmt.Fprintf(w, "and %d more %s: --json lists them all\n", rest, analyzePlural(rest, one, many))
	}
	if other != nil {
		fmt.Fprintf(w, "other %s, past the first %d: %d calls, %d refused, spend %s\n",
			many, len(spends), other.Calls, other.Refused, analyzeUSD(other.SpendUSD))
	}
}

// analyzeUSD formats a dollar amount, "-" if unknown.
func analyzeUSD(v *float64) string {
	switch {
	case v == nil:
		return "-"
	case *v == 0:
		return "$0"
	case *v >= 1:
		return fmt.Sprintf("$%.2f", *v)
	}
	return fmt.Sprintf("$%.4f", *v)
}

func analyzePlural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
