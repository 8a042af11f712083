package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// report is everything a run measured, and the machine it ran on.
type report struct {
	GOOS       string            `json:"goos"`
	GOARCH     string            `json:"goarch"`
	CPUs       int               `json:"cpus"`
	Go         string            `json:"go"`
	Node       string            `json:"node"`
	Portkey    string            `json:"portkey_version"`
	Rounds     int               `json:"rounds"`
	Duration   time.Duration     `json:"duration_ns"`
	SearchStep time.Duration     `json:"search_step_ns"`
	P99Limit   time.Duration     `json:"p99_limit_ns"`
	Skipped    map[string]string `json:"skipped,omitempty"`
	// Summary has one row for each fixed rate, mode and target: medians
	// over the rounds.
	Summary     []summaryRow `json:"summary"`
	MaxRates    []maxRate    `json:"max_rates,omitempty"`
	Points      []roundPoint `json:"points"`
	SearchSteps []point      `json:"search_steps,omitempty"`
}

// roundPoint is a fixed-rate step and the round it belongs to.
type roundPoint struct {
	Round int `json:"round"`
	point
}

// summaryRow is one target at one rate and mode, over all rounds. Added
// figures are the medians of the round-by-round differences from the
// upstream called directly, so that each difference is taken between
// steps run moments apart.
type summaryRow struct {
	Mode     mode          `json:"mode"`
	Rate     int           `json:"rate"`
	Target   string        `json:"target"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
	AddedP50 time.Duration `json:"added_p50_ns"`
	AddedP99 time.Duration `json:"added_p99_ns"`
	Requests int           `json:"requests"`
	Errors   int           `json:"errors"`
}

// maxRate is the highest rate a target sustained in a mode.
type maxRate struct {
	Target string `json:"target"`
	Mode   mode   `json:"mode"`
	Rate   int    `json:"rate"`
}

// summarize fills r.Summary from r.Points.
func (r *report) summarize(targets []target, modes []mode, rates []int) {
	for _, rate := range rates {
		for _, m := range modes {
			direct := map[int]point{}
			for _, p := range r.Points {
				if p.Target == "direct" && p.Mode == m && p.Rate == rate {
					direct[p.Round] = p.point
				}
			}
			for _, t := range targets {
				row := summaryRow{Mode: m, Rate: rate, Target: t.name}
				var p50s, p99s, added50, added99 []time.Duration
				for _, p := range r.Points {
					if p.Target != t.name || p.Mode != m || p.Rate != rate {
						continue
					}
					p50s, p99s = append(p50s, p.P50), append(p99s, p.P99)
					added50 = append(added50, p.P50-direct[p.Round].P50)
					added99 = append(added99, p.P99-direct[p.Round].P99)
					row.Requests += p.Requests
					row.Errors += p.Errors
				}
				row.P50, row.P99 = median(p50s), median(p99s)
				row.AddedP50, row.AddedP99 = median(added50), median(added99)
				r.Summary = append(r.Summary, row)
			}
		}
	}
}

func (r *report) writeJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	return enc.Encode(r)
}

func (r *report) writeTables(w io.Writer) {
	fmt.Fprintf(w, "%s/%s, %d CPUs, %s, node %s, Portkey gateway %s\n", r.GOOS, r.GOARCH, r.CPUs, r.Go, r.Node, r.Portkey)
	for name, why := range r.Skipped {
		fmt.Fprintf(w, "%s skipped: %s\n", name, why)
	}
	fmt.Fprintf(w, "\nmedians of %d rounds of %s per point; added = target − direct, same round\n", r.Rounds, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\trate/s\ttarget\tp50\tp99\tadded p50\tadded p99\terrors\t")
	for _, s := range r.Summary {
		added50, added99 := "", ""
		if s.Target != "direct" {
			added50, added99 = micros(s.AddedP50), micros(s.AddedP99)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d/%d\t\n", s.Mode, s.Rate, s.Target, micros(s.P50), micros(s.P99), added50, added99, s.Errors, s.Requests)
	}
	tw.Flush()
	if len(r.MaxRates) == 0 {
		return
	}
	fmt.Fprintf(w, "\nhighest rate sustained (p99 under %s, no errors), steps of %s\n", r.P99Limit, r.SearchStep)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttarget\trate/s\t")
	for _, m := range r.MaxRates {
		fmt.Fprintf(tw, "%s\t%s\t%d\t\n", m.Mode, m.Target, m.Rate)
	}
	tw.Flush()
}

// micros writes d in microseconds, the unit the added latencies compare in.
func micros(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}
