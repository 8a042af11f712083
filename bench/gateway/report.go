package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"
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
	Nginx      string            `json:"nginx_version,omitempty"`
	Rounds     int               `json:"rounds"`
	Duration   time.Duration     `json:"duration_ns"`
	Slice      time.Duration     `json:"slice_ns,omitempty"`
	SearchStep time.Duration     `json:"search_step_ns"`
	Searches   int               `json:"searches"`
	P99Limit   time.Duration     `json:"p99_limit_ns"`
	Skipped    map[string]string `json:"skipped,omitempty"`
	// Summary has one row for each fixed rate, mode and target: medians
	// over the rounds.
	Summary     []summaryRow `json:"summary"`
	MaxRates    []maxRate    `json:"max_rates,omitempty"`
	Points      []roundPoint `json:"points"`
	SearchSteps []point      `json:"search_steps,omitempty"`
	Costs       []procCost   `json:"costs,omitempty"`
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

// maxRate is the highest rate a target sustained in a mode: the median
// of what each search found, and the spread between the lowest and the
// highest.
type maxRate struct {
	Target   string `json:"target"`
	Mode     mode   `json:"mode"`
	Rate     int    `json:"rate"`
	Searches []int  `json:"searches"`
	Low      int    `json:"low"`
	High     int    `json:"high"`
}

// newMaxRate sums up the searches of one target and mode.
func newMaxRate(target string, m mode, found []int) maxRate {
	r := maxRate{Target: target, Mode: m, Searches: found}
	if len(found) == 0 {
		return r
	}
	s := slices.Sorted(slices.Values(found))
	r.Low, r.High = s[0], s[len(s)-1]
	r.Rate = s[len(s)/2]
	if len(s)%2 == 0 {
		r.Rate = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return r
}

// spread is how far the searches' lowest and highest lie from their
// median, as a fraction of it: 0.1 when they lie within a tenth.
func (r maxRate) spread() float64 {
	if r.Rate == 0 {
		return 0
	}
	return float64(max(r.High-r.Rate, r.Rate-r.Low)) / float64(r.Rate)
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
	fmt.Fprintf(w, "%s/%s, %d CPUs, %s, node %s, Portkey gateway %s, %s\n", r.GOOS, r.GOARCH, r.CPUs, r.Go, r.Node, r.Portkey, cmp.Or(r.Nginx, "no nginx"))
	for name, why := range r.Skipped {
		fmt.Fprintf(w, "%s skipped: %s\n", name, why)
	}
	turns := "one step per target"
	if r.Slice > 0 {
		turns = "the targets in turns of " + r.Slice.String()
	}
	fmt.Fprintf(w, "\nmedians of %d rounds of %s per point, %s; added = target − direct, same round\n", r.Rounds, r.Duration, turns)
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
		r.writeSideBySide(w)
		return
	}
	fmt.Fprintf(w, "\nhighest rate sustained (p99 under %s, no errors), steps of %s: median of %d searches, lowest and highest\n", r.P99Limit, r.SearchStep, r.Searches)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\ttarget\trate/s\tlowest\thighest\tspread\t")
	for _, m := range r.MaxRates {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t±%.0f%%\t\n", m.Mode, m.Target, m.Rate, m.Low, m.High, 100*m.spread())
	}
	tw.Flush()
	r.writeSideBySide(w)
}

// writeSideBySide writes, for each target, what it adds at the first
// fixed rate and the highest rate it sustained, plain and streamed, on one
// line.
func (r *report) writeSideBySide(w io.Writer) {
	if len(r.Summary) == 0 {
		return
	}
	first := r.Summary[0].Rate
	fmt.Fprintf(w, "\nside by side: added at %d/s (p50 / p99), highest rate sustained (median)\n", first)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tplain added\tstreamed added\tplain rate/s\tstreamed rate/s\t")
	for _, s := range r.Summary {
		if s.Rate != first || s.Mode != plain || s.Target == "direct" {
			continue
		}
		line := s.Target
		for _, m := range []mode{plain, streamed} {
			if row, ok := r.row(s.Target, m, first); ok {
				line += fmt.Sprintf("\t%s / %s", micros(row.AddedP50), micros(row.AddedP99))
			}
		}
		for _, m := range []mode{plain, streamed} {
			rate := "not searched"
			if mr, ok := r.rateFound(s.Target, m); ok {
				rate = fmt.Sprint(mr.Rate)
			}
			line += "\t" + rate
		}
		fmt.Fprintln(tw, line+"\t")
	}
	tw.Flush()
	r.writeAgainstHop(w, first)
}

// writeAgainstHop writes, when the hop was measured, each gateway's added
// p50 and p99 at rate and its highest sustained rate as multiples of the
// hop's: a Go proxy's figures against the least a Go proxy does.
func (r *report) writeAgainstHop(w io.Writer, rate int) {
	if _, ok := r.row("hop", plain, rate); !ok {
		return
	}
	ratio := func(a, b float64) string {
		if b <= 0 {
			return "-"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	fmt.Fprintf(w, "\nagainst the hop: added p50, added p99 and highest rate, each over the hop's\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tplain p50\tplain p99\tstreamed p50\tstreamed p99\tplain rate\tstreamed rate\t")
	for _, s := range r.Summary {
		if s.Rate != rate || s.Mode != plain || s.Target == "direct" || s.Target == "hop" {
			continue
		}
		line := s.Target
		for _, m := range []mode{plain, streamed} {
			row, _ := r.row(s.Target, m, rate)
			hop, _ := r.row("hop", m, rate)
			line += "\t" + ratio(float64(row.AddedP50), float64(hop.AddedP50)) + "\t" + ratio(float64(row.AddedP99), float64(hop.AddedP99))
		}
		for _, m := range []mode{plain, streamed} {
			mine, _ := r.rateFound(s.Target, m)
			hop, _ := r.rateFound("hop", m)
			line += "\t" + ratio(float64(mine.Rate), float64(hop.Rate))
		}
		fmt.Fprintln(tw, line+"\t")
	}
	tw.Flush()
}

// row returns the summary of target in mode m at rate, if measured.
func (r *report) row(target string, m mode, rate int) (summaryRow, bool) {
	for _, row := range r.Summary {
		if row.Rate == rate && row.Mode == m && row.Target == target {
			return row, true
		}
	}
	return summaryRow{}, false
}

// rateFound returns the highest rate target sustained in mode m, if
// searched.
func (r *report) rateFound(target string, m mode) (maxRate, bool) {
	for _, mr := range r.MaxRates {
		if mr.Target == target && mr.Mode == m {
			return mr, true
		}
	}
	return maxRate{}, false
}

// micros writes d in microseconds, the unit the added latencies compare in.
func micros(d time.Duration) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
}
