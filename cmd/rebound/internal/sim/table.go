package sim

import (
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
)

// WriteTable writes r beside Brooker's published figures.
func (r OCCReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "rebound sim --scenario occ, seed %d, %d trials: Brooker's OCC experiment, mean writes and completion time\n\n",
		r.Seed, r.Trials)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tclients\twrites\tpublished\tdiff\tcompletion\tpublished\tdiff\tsucceeded\t")
	for _, res := range r.Results {
		pubW, diffW, pubC, diffC := "—", "—", "—", "—"
		if p, ok := OCCPublished(res.Strategy, res.Clients); ok {
			pubW = fmt.Sprintf("%.0f", p.Writes)
			diffW = fmt.Sprintf("%+.1f%%", 100*(res.Writes/p.Writes-1))
			pubC = fmt.Sprintf("%.2f s", p.Completion.Seconds())
			diffC = fmt.Sprintf("%+.1f%%", 100*(res.CompletionMS/float64(p.Completion.Milliseconds())-1))
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%.2f s\t%s\t%s\t%g/%d\t\n", res.Strategy, res.Clients, res.Writes, pubW, diffW,
			res.CompletionMS/1000, pubC, diffC, res.Succeeded, res.Clients)
	}
	tw.Flush()
}

// WriteTable writes r beside the theoretical figures.
func (r IIDReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "rebound sim --scenario iid, seed %d: independent failures, success rate and attempts per call\n\n", r.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "attempts\tp\tsuccess\ttheory\tload\ttheory\t")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%d\t%g\t%.4f\t%.4f\t%.4f\t%.4f\t\n", res.MaxAttempts, res.P, res.Success, res.SuccessBound,
			res.Load, res.LoadBound)
	}
	tw.Flush()
}

// WriteTable writes each result, then the map: recovery time by cell and
// strategy.
func (r OverloadReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "rebound sim --scenario overload, seed %d: capacity 100/s, arrivals 90/s, deadline 5 s, attempt timeout 1 s\n\n", r.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "f\tΔt\tstrategy\tgoodput/s\tamplification\tsuccess\trecovery\t")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%.1f\t%.0f s\t%s\t%.1f\t%.2f\t%.1f%%\t%s\t\n", x.TriggerFraction, x.TriggerS, x.Strategy,
			x.Goodput, x.Amplification, 100*x.SuccessRate, recovery(x))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nmap: recovery time after the trigger ends (never: metastable)")
	var strategies []string
	type cell struct{ f, d float64 }
	var cells []cell
	at := map[cell]map[string]OverloadResult{}
	for _, x := range r.Results {
		c := cell{x.TriggerFraction, x.TriggerS}
		if at[c] == nil {
			at[c] = map[string]OverloadResult{}
			cells = append(cells, c)
		}
		if !slices.Contains(strategies, x.Strategy) {
			strategies = append(strategies, x.Strategy)
		}
		at[c][x.Strategy] = x
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "cell\t")
	for _, s := range strategies {
		fmt.Fprintf(tw, "%s\t", s)
	}
	fmt.Fprintln(tw)
	for _, c := range cells {
		fmt.Fprintf(tw, "f=%.1f Δt=%.0fs\t", c.f, c.d)
		for _, s := range strategies {
			fmt.Fprintf(tw, "%s\t", recovery(at[c][s]))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// recovery is x's recovery time as the table shows it.
func recovery(x OverloadResult) string {
	if !x.Recovered {
		return "never"
	}
	return fmt.Sprintf("%.0f s", x.RecoveryS)
}

// WriteTable writes each strategy's interactive latency and batch.
func (r PriorityReport) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "rebound sim --scenario priority, seed %d: provider %d calls at a time (%.1f/s), interactive at %.0f%% of it, "+
		"a batch of %d requests %d at a time from %.0f s\n\n", r.Seed, PrioritySlots, PriorityCapacity(),
		100*PriorityInteractiveShare, PriorityBatchRequests, PriorityBatchConcurrency, PriorityWarmup.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tinteractive p50\tp99\tbatch completed\tbatch time\t")
	for _, x := range r.Results {
		batch, took := "—", "—"
		if x.Strategy != PriorityNoFlood {
			batch = fmt.Sprintf("%d/%d", x.BatchCompleted, PriorityBatchRequests)
			took = fmt.Sprintf("%.0f s", x.BatchS)
			if !x.BatchDone {
				took = "unfinished"
			}
		}
		fmt.Fprintf(tw, "%s\t%.2f s\t%.2f s\t%s\t%s\t\n", x.Name(), x.InteractiveP50MS/1000, x.InteractiveP99MS/1000, batch, took)
	}
	tw.Flush()
}

// WriteTable writes each strategy's time to first token and spend beside
// theory's, then the ratio of the p99s.
func (r HedgeReport) WriteTable(w io.Writer) {
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

// WriteTable writes each strategy's month of w: requests, spend, waste
// and success.
func (r CostReport) WriteTable(out io.Writer, w CostWorkload) {
	w = w.withDefaults()
	fmt.Fprintf(out, "rebound bench --scenario cost, seed %d: %d days × %d tasks, first attempts failing %.1f%%\n\n",
		r.Seed, w.Days, w.TasksPerDay, 100*r.FirstAttemptFailureRate)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\trequests\tto fallback\t$ / month\twasted\tsuccess\t$ / successful task\t")
	for _, s := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.1f%%\t%.2f%%\t%.5f\t\n", s.Name, s.Requests, s.FallbackRequests,
			s.MonthlyCostUSD, 100*s.WastedShare, 100*s.SuccessRate, s.CostPerSuccessUSD)
	}
	tw.Flush()
}
