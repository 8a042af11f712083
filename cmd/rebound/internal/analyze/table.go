package analyze

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteMalformed writes to w, one line per input of read, the malformed
// lines the command skipped in it.
func WriteMalformed(w io.Writer, read []File) {
	for _, f := range read {
		if f.Malformed > 0 {
			fmt.Fprintf(w, "rebound analyze: %s: %d of %d lines malformed (%s)\n", f.Name, f.Malformed, f.Lines, f.LineNumbers())
		}
	}
}

// LineNumbers lists the malformed lines f kept: "line 2, 4, …".
func (f *File) LineNumbers() string {
	nums := make([]string, len(f.MalformedLines))
	for i, n := range f.MalformedLines {
		nums[i] = strconv.FormatInt(n, 10)
	}
	if f.Malformed > int64(len(nums)) {
		nums = append(nums, "…")
	}
	return "line " + strings.Join(nums, ", ")
}

// NoCalls says what the inputs of r, in which there is not one call,
// held instead: "log.jsonl: it is empty".
func (r *Report) NoCalls() string {
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
		return fmt.Sprintf("%s: %d lines, %d malformed (%s), %d skipped", where, f.Lines, f.Malformed, f.LineNumbers(), f.Skipped)
	}
	return fmt.Sprintf("%s: %d lines, %d malformed, %d skipped", where, r.Lines, r.Malformed, r.Skipped)
}

// ReadFile reads the file name into a, or stdin for "-".
func (a *Analyzer) ReadFile(ctx context.Context, name string, stdin io.Reader) (File, error) {
	if name == "-" {
		return a.Read(ctx, name, stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return File{}, err
	}
	defer f.Close()
	file, err := a.Read(ctx, name, f)
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("%s: %w", name, err)
	}
	return file, err
}

// WriteTable writes r as the tables "rebound analyze" prints: the groups
// and a summary, then the runs' and the tenants' spend, if calls name
// them.
func (r *Report) WriteTable(w io.Writer) {
	r.writeGroups(w)
	writeSpend(w, "run", "runs", r.Runs, r.OtherRuns)
	writeSpend(w, "tenant", "tenants", r.Tenants, r.OtherTenants)
}

// writeGroups writes the groups as a table, and a summary.
func (r *Report) writeGroups(w io.Writer) {
	t := &r.Totals
	fmt.Fprintf(w, "%d %s, %d lines: %d calls, %d skipped, %d malformed\n\n",
		len(r.Files), plural(len(r.Files), "file", "files"), r.Lines, r.Calls, r.Skipped, r.Malformed)
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
			row.WastedAttempts, formatUSD(row.WastedUSD), rec)
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
			formatUSD(t.CostUSD), known, formatUSD(t.WastedUSD), wastedShare, formatUSD(t.CostPerSuccessUSD))
	} else {
		fmt.Fprintln(w, "cost unknown: no call logs a cost, nor tokens to price with --price-in and --price-out")
	}
	if t.CacheReadShare != nil {
		saved := ""
		if t.CacheSavedUSD != nil {
			saved = "; the cache saved " + formatUSD(t.CacheSavedUSD)
			if more := -*t.CacheSavedUSD; more > 0 {
				saved = "; the cache cost " + formatUSD(&more) + " more than input read afresh"
			}
		}
		fmt.Fprintf(w, "input %d tokens: %.1f%% read from the cache, %.1f%% written into it%s\n",
			t.InputTokens, 100**t.CacheReadShare, 100*rate(t.CacheWriteTokens, t.InputTokens), saved)
	}
	if served := t.ResponseCacheHits + t.ResponseCacheStale; served > 0 {
		saved := ""
		if t.ResponseCacheSavedUSD != nil {
			saved = "; they did not cost " + formatUSD(t.ResponseCacheSavedUSD)
		}
		fmt.Fprintf(w, "answered from the response cache %d: %d fresh (hit), %d stale in place of a failure%s\n",
			served, t.ResponseCacheHits, t.ResponseCacheStale, saved)
	}
	if t.FutileRetries == 0 {
		return
	}
	fee := ""
	if t.FutileRetryCostUSD != nil {
		fee = ", " + formatUSD(t.FutileRetryCostUSD)
	}
	fmt.Fprintf(w, "retries spent on errors that can never succeed: %d%s\n", t.FutileRetries, fee)
	for _, row := range r.Rows {
		if !row.Futile {
			continue
		}
		waste := fmt.Sprintf("%d attempts wasted", row.WastedAttempts)
		if row.WastedUSD != nil {
			waste = formatUSD(row.WastedUSD) + " wasted"
		}
		fmt.Fprintf(w, "  %s: %d calls, %d retries, %s; %s\n", row.Group, row.Calls, row.Retries, waste, row.Recommendation)
	}
}

// spendShown is how many runs, and how many tenants, the table lists.
const spendShown = 20

// writeSpend writes the spend of the runs or tenants in spends against
// their caps, the first spendShown of them, and the calls of the others
// past the analyzer's bound; nothing if there are none.
func writeSpend(w io.Writer, one, many string, spends []Spend, other *OtherSpend) {
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
		many, len(spends), passed, plural(passed, "its", "their"), refused)
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
			formatUSD(s.SpendUSD), formatUSD(s.CapUSD), share, verdict)
	}
	tw.Flush()
	if rest := len(spends) - spendShown; rest > 0 {
		fmt.Fprintf(w, "and %d more %s: --json lists them all\n", rest, plural(rest, one, many))
	}
	if other != nil {
		fmt.Fprintf(w, "other %s, past the first %d: %d calls, %d refused, spend %s\n",
			many, len(spends), other.Calls, other.Refused, formatUSD(other.SpendUSD))
	}
}

// formatUSD formats a dollar amount, "-" if unknown.
func formatUSD(v *float64) string {
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

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
