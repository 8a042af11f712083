package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/sim"
)

// runHedgeSim runs the hedge scenario: --trials is the number of calls.
func runHedgeSim(ctx context.Context, o simOptions, stderr io.Writer) (any, int) {
	if o.cells != "" {
		fmt.Fprintf(stderr, "rebound sim: --%s does not apply to the hedge scenario: its model is fixed\n", o.cellsFlag)
		return nil, 2
	}
	c := sim.HedgeConfig{Calls: o.trials}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "rebound sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return nil, 2
	}
	fmt.Fprintf(stderr, "rebound sim: hedge scenario, seed %d, %d calls without and with a hedge…\n", o.seed, o.trials)
	c.Progress = func(r sim.HedgeResult) {
		fmt.Fprintf(stderr, "rebound sim: %s: p50 %.0f ms, p99 %.0f ms, %.1f%% hedged, %+.2f%% spend\n",
			r.Strategy, r.P50MS, r.P99MS, 100*r.Hedged, 100*r.ExtraSpend)
	}
	start := time.Now()
	r, err := sim.RunHedge(ctx, o.seed, c)
	if err != nil {
		fmt.Fprintf(stderr, "rebound sim: %v\n", err)
		return nil, 1
	}
	fmt.Fprintf(stderr, "rebound sim: done in %v\n", time.Since(start).Round(time.Millisecond))
	return r, 0
}

// printHedge prints each strategy's time to first token and spend beside
// theory's, then the ratio of the p99s.
func printHedge(w io.Writer, r sim.HedgeReport) {
	fmt.Fprintf(w, "rebound sim --scenario hedge, seed %d, %d calls: time to first token and spend, without and with a hedge\n\n",
		r.Seed, r.Calls)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tp50\ttheory\tp99\ttheory\tmean\thedged\textra spend\ttheory\t")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%.2f s\t%.2f s\t%.2f s\t%.2f s\t%.2f s\t%.1f%%\t%+.2f%%\t%+.2f%%\t\n", x.Strategy,
			x.P50MS/1000, x.P50TheoryMS/1000, x.P99MS/1000, x.P99TheoryMS/1000, x.MeanMS/1000,
			100*x.Hedged, 100*x.ExtraSpend, 100*x.ExtraSpendTheory)
	}
	tw.Flush()
	if len(r.Results) == 2 {
		none, hedge := r.Results[0], r.Results[1]
		fmt.Fprintf(w, "\np99 %.1f times lower with a hedge (theory %.1f), for %.1f%% more spend",
			none.P99MS/hedge.P99MS, none.P99TheoryMS/hedge.P99TheoryMS, 100*hedge.ExtraSpend)
		if hedge.Refused > 0 {
			fmt.Fprintf(w, "; the retry budget refused %.2f%% of calls a hedge", 100*hedge.Refused)
		}
		fmt.Fprintln(w)
	}
}
