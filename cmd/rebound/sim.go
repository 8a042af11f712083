package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/sim"
)

const simUsage = `usage: rebound sim [--scenario occ|iid|overload|priority|hedge] [--json] [--html FILE] [--seed N] [--trials N]
                   [--cells C,C,...] [--clients N,N,...] [--strategies S,S,...] [--attempts N,N,...]

Run a simulation in virtual time through rebound's real retry code (each
simulated call a rebound.Run under a virtual clock), and print ours beside
the published or theoretical figures. The same seed gives the same numbers. --html FILE also
writes the results as a self-contained HTML page of charts.

--scenario occ (the default) re-runs Brooker's optimistic-concurrency
experiment ("Exponential Backoff and Jitter", AWS Architecture Blog, 2015):
N clients read a versioned row and write it back, a write succeeding only if
the version is still current, each client retrying after backoff until its
write succeeds; every network hop takes |Normal(10 ms, 2 ms)|. For each
strategy (exponential, decorrelated, equal, full, none) and each client
count it reports the mean writes and completion time over --trials trials
(default 100, seed 2015). --cells is another name for --clients in this
scenario.

--scenario iid fails every attempt independently with probability p. For
each policy (--attempts, default 1,2,3,4,6 attempts without delay) and each
p (--cells, default 0,0.05,...,0.5) it makes --trials calls (default 100000,
seed 1) and reports the share that succeeded and the attempts per call,
beside the theory: 1 - p^n and (1 - p^n)/(1 - p) for n attempts.

--scenario overload: one provider serves attempts first in, first out at
100 a second; calls arrive at 90 a second, each with a 5 s deadline and a
1 s timeout per attempt, and an attempt its client gave up on is still
served. After 30 s a trigger drops capacity to a fraction f for Δt seconds;
the run goes on for 10·Δt after it. For each strategy (none, retry3, budget,
rebound) and each cell (--cells, as f x seconds, default
0.1x5,0.1x10,0.1x30,0.5x5,0.5x10,0.5x30; seed 1) it reports goodput,
amplification (attempts per call), success rate and recovery time, and a
map of the cells.

--scenario priority: one provider serves 16 calls at a time, each for a
log-normal time (median 1 s, sigma 0.5: 14.1 calls a second), behind an
adaptive limit of 16. Interactive calls arrive at 60% of that capacity;
after 60 s a batch of 3000 requests starts, 64 at a time; the run lasts
20 minutes. For each strategy (noflood: interactive calls alone; fifo: the
batch on top, one queue; priority: the batch's calls marked Batch) it
reports the interactive calls' p50 and p99 latency from arrival to answer
(the wait for a slot included), and whether and how fast the batch
completed. --cells lists the MaxPassOver values the priority strategy runs
with (default 8, the limit's default; seed 1).

--scenario hedge makes the same calls without and with a hedge (rebound's
zero Hedge: a second attempt once the first has gone longer without a
token than the 90th percentile of the last 256 first-token times, none
until 16 are known; each hedge drawn from a zero RetryBudget). Every
attempt's time to first token is lognormal around 1 s with σ = 0.35, and
for 5% of attempts ten times that; calls of 2000 input and 500 output
tokens arrive at 20 a second (Poisson), stream 50 tokens a second after
their first, and cost Claude Sonnet 4's list price, $3 / $15 per million
input / output tokens. The loser of a race is cancelled at the winner's
first token and billed its input and the output it had produced. It
reports p50, p99 and mean time to first token, the share of calls hedged
and the spend beyond the unhedged calls', beside theory. --trials is the
number of calls (default 100000, seed 1); a p99 needs at least 100000
to rest on a thousand calls.

flags:
`

// simOptions are the parsed flags of "rebound sim", for every scenario.
type simOptions struct {
	json   bool
	html   string // --html: the page to write, "" for none
	seed   uint64
	trials int
	// cells is the list --cells or --clients gave, unparsed ("" for the
	// scenario's default): each scenario reads its own kind of cell.
	// cellsFlag is the name it came by.
	cells, cellsFlag string
	strategies       []string // nil: the scenario's default
	attempts         []int    // nil: the scenario's default
}

// simScenario is one scenario of "rebound sim".
type simScenario struct {
	name string
	// seed and trials are the defaults of --seed and --trials, and
	// maxTrials the most --trials may ask.
	seed              uint64
	trials, maxTrials int
	// flags are the flags of its own it takes, beyond those every
	// scenario takes (--json, --html, --seed, --cells).
	flags []string
	// run runs the scenario, telling stderr of its progress, and returns
	// its report, which --json prints as it is. A non-zero code stops the
	// command with it, its one-line reason already on stderr.
	run func(ctx context.Context, o simOptions, stderr io.Writer) (report any, code int)
	// table prints the report as a table.
	table func(w io.Writer, report any)
	// charts, if set, draws the report for --html; a scenario without it
	// refuses --html.
	charts func(report any) []sim.Chart
}

// simScenarios are the scenarios "rebound sim --scenario" accepts.
var simScenarios = []simScenario{
	{
		name: "occ", seed: 2015, trials: sim.DefaultOCCTrials, maxTrials: 10000,
		flags:  []string{"clients", "strategies", "trials"},
		run:    runOCCSim,
		table:  func(w io.Writer, r any) { printOCC(w, r.(sim.OCCReport)) },
		charts: func(r any) []sim.Chart { return r.(sim.OCCReport).Charts() },
	},
	{
		name: "iid", seed: 1, trials: sim.DefaultIIDTrials, maxTrials: 10000000,
		flags:  []string{"attempts", "trials"},
		run:    runIIDSim,
		table:  func(w io.Writer, r any) { printIID(w, r.(sim.IIDReport)) },
		charts: func(r any) []sim.Chart { return r.(sim.IIDReport).Charts() },
	},
	{
		name: "overload", seed: 1, trials: 1, maxTrials: 1, // one run per cell: the model is fixed
		flags:  []string{"strategies"},
		run:    runOverloadSim,
		table:  func(w io.Writer, r any) { printOverload(w, r.(sim.OverloadReport)) },
		charts: func(r any) []sim.Chart { return r.(sim.OverloadReport).Charts() },
	},
	{
		name: "priority", seed: 1, trials: 1, maxTrials: 1, // one run per strategy: the model is fixed
		flags:  []string{"strategies"},
		run:    runPrioritySim,
		table:  func(w io.Writer, r any) { printPriority(w, r.(sim.PriorityReport)) },
		charts: func(r any) []sim.Chart { return r.(sim.PriorityReport).Charts() },
	},
	{
		name: "hedge", seed: 1, trials: sim.DefaultHedgeCalls, maxTrials: sim.MaxHedgeCalls,
		flags:  []string{"trials"},
		run:    runHedgeSim,
		table:  func(w io.Writer, r any) { printHedge(w, r.(sim.HedgeReport)) },
		charts: func(r any) []sim.Chart { return r.(sim.HedgeReport).Charts() },
	},
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	var o simOptions
	scenario := fs.String("scenario", "occ", "the simulation to run: "+simScenarioNames())
	fs.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	fs.StringVar(&o.html, "html", "", "also write the results as an HTML page of charts to `FILE`")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of every random draw (default "+simDefaults(func(s simScenario) uint64 { return s.seed })+")")
	fs.IntVar(&o.trials, "trials", 0, "trials each figure averages over (default "+
		simDefaults(func(s simScenario) uint64 { return uint64(s.trials) })+")")
	cells := func(name string) func(string) error {
		return func(s string) error {
			if o.cellsFlag != "" && o.cellsFlag != name {
				return fmt.Errorf("--cells is another name for --clients: give one of them")
			}
			o.cells, o.cellsFlag = s, name
			return nil
		}
	}
	fs.Func("clients", "occ: comma-separated client counts (default 10,20,50,100,150,190)", cells("clients"))
	fs.Func("cells", "the scenario's cells: occ, the same as --clients; iid, failure probabilities (default 0,0.05,...,0.5); "+
		"overload, fractions x seconds; priority, the MaxPassOver values of its priority strategy",
		cells("cells"))
	fs.Func("strategies", "occ, overload, priority: comma-separated strategies (default all; occ: "+strings.Join(sim.OCCStrategies(), ",")+
		"; overload: "+strings.Join(sim.OverloadStrategies(), ",")+"; priority: "+strings.Join(sim.PriorityStrategies(), ",")+")",
		func(s string) error {
			for item := range strings.SplitSeq(s, ",") {
				item = strings.TrimSpace(item)
				if item == "" {
					return errors.New("empty strategy name")
				}
				o.strategies = append(o.strategies, item)
			}
			return nil
		})
	fs.Func("attempts", "iid: comma-separated MaxAttempts of the policies compared (default 1,2,3,4,6)", func(s string) error {
		var err error
		o.attempts, err = parseIntList(s)
		return err
	})
	if code, done := parseFlags(fs, args, simUsage, stderr); done {
		return code
	}
	i := slices.IndexFunc(simScenarios, func(s simScenario) bool { return s.name == *scenario })
	if i < 0 {
		fmt.Fprintf(stderr, "rebound sim: unknown scenario %q (want %s)\n", *scenario, simScenarioNames())
		return 2
	}
	s := simScenarios[i]
	owners := map[string][]string{}
	for _, sc := range simScenarios {
		for _, f := range sc.flags {
			owners[f] = append(owners[f], sc.name)
		}
	}
	if err := foreignFlag(fs, s.name, owners); err != nil {
		fmt.Fprintf(stderr, "rebound sim: %v\n", err)
		return 2
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["seed"] {
		o.seed = s.seed
	}
	if !set["trials"] {
		o.trials = s.trials
	}
	if err := intFlag("trials", o.trials, 1, s.maxTrials,
		fmt.Sprintf("a whole number from 1 to %d for the %s scenario", s.maxTrials, s.name)); err != nil {
		fmt.Fprintf(stderr, "rebound sim: %v\n", err)
		return 2
	}
	if o.html != "" && s.charts == nil {
		fmt.Fprintf(stderr, "rebound sim: the %s scenario draws no charts for --html\n", s.name)
		return 2
	}
	var page *simPage
	if o.html != "" {
		// A page that cannot be written fails now, not after the run.
		var err error
		if page, err = openSimPage(o.html); err != nil {
			fmt.Fprintf(stderr, "rebound sim: --html: %v\n", err)
			return 1
		}
	}
	report, code := s.run(ctx, o, stderr)
	if code != 0 {
		page.discard()
		return code
	}
	if page != nil {
		title := fmt.Sprintf("rebound sim --scenario %s, seed %d", s.name, o.seed)
		if o.trials > 1 {
			title += fmt.Sprintf(", %d trials", o.trials)
		}
		if err := page.write(title, s.charts(report)); err != nil {
			fmt.Fprintf(stderr, "rebound sim: --html: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "rebound sim: wrote %s\n", o.html)
	}
	if o.json {
		return printJSON(stdout, stderr, report)
	}
	s.table(stdout, report)
	return 0
}

// simPage is the file --html names, opened before the run.
type simPage struct {
	f *os.File
	// created says the run created the file, so that a run that fails
	// leaves no empty page behind (and an existing one untouched).
	created bool
}

// openSimPage opens path for writing without changing it yet.
func openSimPage(path string) (*simPage, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		return &simPage{f: f, created: true}, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	f, err = os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	return &simPage{f: f}, nil
}

// write replaces the page with the charts, and closes it.
func (p *simPage) write(title string, charts []sim.Chart) error {
	var b bytes.Buffer
	err := sim.WriteHTML(&b, title, charts)
	if err == nil {
		err = p.f.Truncate(0)
	}
	if err == nil {
		_, err = p.f.Write(b.Bytes())
	}
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err != nil && p.created {
		os.Remove(p.f.Name())
	}
	return err
}

// discard closes the page of a run that failed, removing it if the run
// created it. A nil page is none.
func (p *simPage) discard() {
	if p == nil {
		return
	}
	p.f.Close()
	if p.created {
		os.Remove(p.f.Name())
	}
}

// simDefaults lists a per-scenario default as "2015 for occ, 1 for iid".
func simDefaults(of func(simScenario) uint64) string {
	list := make([]string, len(simScenarios))
	for i, s := range simScenarios {
		list[i] = fmt.Sprintf("%d for %s", of(s), s.name)
	}
	return strings.Join(list, ", ")
}

// simScenarioNames lists the scenarios as "a, b or c".
func simScenarioNames() string {
	names := make([]string, len(simScenarios))
	for i, s := range simScenarios {
		names[i] = s.name
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// parseIntList parses "10,50,100".
func parseIntList(s string) ([]int, error) {
	var list []int
	for item := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(item))
		if err != nil {
			return nil, fmt.Errorf("%q is not a whole number", strings.TrimSpace(item))
		}
		list = append(list, n)
	}
	return list, nil
}

// runOCCSim runs the occ scenario.
func runOCCSim(ctx context.Context, o simOptions, stderr io.Writer) (any, int) {
	c := sim.OCCConfig{Strategies: o.strategies, Trials: o.trials}
	if o.cells != "" {
		var err error
		if c.Clients, err = parseIntList(o.cells); err != nil {
			fmt.Fprintf(stderr, "rebound sim: --%s: %v\n", o.cellsFlag, err)
			return nil, 2
		}
	}
	for _, n := range c.Clients {
		if err := intFlag(o.cellsFlag, n, 1, maxOCCClients, fmt.Sprintf("a positive whole number of clients up to %d", maxOCCClients)); err != nil {
			fmt.Fprintf(stderr, "rebound sim: %v\n", err)
			return nil, 2
		}
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "rebound sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return nil, 2
	}
	strategies, clients := len(c.Strategies), len(c.Clients)
	if strategies == 0 {
		strategies = len(sim.OCCStrategies())
	}
	if clients == 0 {
		clients = len(sim.DefaultOCCClients())
	}
	cells := strategies * clients
	fmt.Fprintf(stderr, "rebound sim: occ scenario, seed %d, %d trials of %d cells…\n", o.seed, o.trials, cells)
	done := 0
	c.Progress = func(r sim.OCCResult) {
		done++
		fmt.Fprintf(stderr, "rebound sim: [%d/%d] %s, %d clients: %.1f writes, %.2f s\n",
			done, cells, r.Strategy, r.Clients, r.Writes, r.CompletionMS/1000)
	}
	start := time.Now()
	r, err := sim.RunOCC(ctx, o.seed, c)
	if err != nil {
		fmt.Fprintf(stderr, "rebound sim: %v\n", err)
		return nil, 1
	}
	fmt.Fprintf(stderr, "rebound sim: done in %v\n", time.Since(start).Round(time.Millisecond))
	return r, 0
}

// maxOCCClients is the most clients --clients takes: the writes of a
// trial grow faster than the square of the clients, and a cell tells its
// progress only when its trials are done.
const maxOCCClients = 1000

// printOCC prints an OCC report beside Brooker's published figures.
func printOCC(w io.Writer, r sim.OCCReport) {
	fmt.Fprintf(w, "rebound sim --scenario occ, seed %d, %d trials: Brooker's OCC experiment, mean writes and completion time\n\n",
		r.Seed, r.Trials)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tclients\twrites\tpublished\tdiff\tcompletion\tpublished\tdiff\tsucceeded\t")
	for _, res := range r.Results {
		pubW, diffW, pubC, diffC := "—", "—", "—", "—"
		if p, ok := sim.OCCPublished(res.Strategy, res.Clients); ok {
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

// runIIDSim runs the iid scenario.
func runIIDSim(ctx context.Context, o simOptions, stderr io.Writer) (any, int) {
	c := sim.IIDConfig{Attempts: o.attempts, Trials: o.trials}
	if o.cells != "" {
		var err error
		if c.Rates, err = parseFloatList(o.cells); err != nil {
			fmt.Fprintf(stderr, "rebound sim: --cells: %v\n", err)
			return nil, 2
		}
	}
	for _, p := range c.Rates {
		if err := floatFlag("cells", p, 0, 1, "failure probabilities within [0, 1]"); err != nil {
			fmt.Fprintf(stderr, "rebound sim: %v\n", err)
			return nil, 2
		}
	}
	for _, n := range c.Attempts {
		if err := intFlag("attempts", n, 1, maxIIDAttempts, fmt.Sprintf("at least 1 and at most %d", maxIIDAttempts)); err != nil {
			fmt.Fprintf(stderr, "rebound sim: %v\n", err)
			return nil, 2
		}
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "rebound sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return nil, 2
	}
	attempts, rates := len(c.Attempts), len(c.Rates)
	if attempts == 0 {
		attempts = len(sim.DefaultIIDAttempts())
	}
	if rates == 0 {
		rates = len(sim.DefaultIIDRates())
	}
	cells := attempts * rates
	fmt.Fprintf(stderr, "rebound sim: iid scenario, seed %d, %d calls in each of %d cells…\n", o.seed, o.trials, cells)
	done := 0
	c.Progress = func(r sim.IIDResult) {
		done++
		fmt.Fprintf(stderr, "rebound sim: [%d/%d] %d attempts, p = %g: success %.4f, load %.3f\n",
			done, cells, r.MaxAttempts, r.P, r.Success, r.Load)
	}
	start := time.Now()
	r, err := sim.RunIID(ctx, o.seed, c)
	if err != nil {
		fmt.Fprintf(stderr, "rebound sim: %v\n", err)
		return nil, 1
	}
	fmt.Fprintf(stderr, "rebound sim: done in %v\n", time.Since(start).Round(time.Millisecond))
	return r, 0
}

// maxIIDAttempts is the most attempts --attempts takes: at p = 1 every
// call makes them all, and a cell is checked for cancellation only
// between calls.
const maxIIDAttempts = 100

// parseFloatList parses "0,0.1,0.25".
func parseFloatList(s string) ([]float64, error) {
	var list []float64
	for item := range strings.SplitSeq(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(item), 64)
		if err != nil {
			return nil, fmt.Errorf("%q is not a number", strings.TrimSpace(item))
		}
		list = append(list, v)
	}
	return list, nil
}

// printIID prints an iid report beside the theoretical figures.
func printIID(w io.Writer, r sim.IIDReport) {
	fmt.Fprintf(w, "rebound sim --scenario iid, seed %d: independent failures, success rate and attempts per call\n\n", r.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "attempts\tp\tsuccess\ttheory\tload\ttheory\t")
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%d\t%g\t%.4f\t%.4f\t%.4f\t%.4f\t\n", res.MaxAttempts, res.P, res.Success, res.SuccessBound,
			res.Load, res.LoadBound)
	}
	tw.Flush()
}

func runOverloadSim(ctx context.Context, o simOptions, stderr io.Writer) (any, int) {
	c := sim.OverloadConfig{Strategies: o.strategies}
	if o.cells != "" {
		want := fmt.Sprintf("a fraction in (0, 1] x seconds up to %.0f, like 0.1x30", sim.MaxOverloadTrigger.Seconds())
		for item := range strings.SplitSeq(o.cells, ",") {
			item = strings.TrimSpace(item)
			f, secs, ok := strings.Cut(item, "x")
			fv, ferr := strconv.ParseFloat(f, 64)
			sv, serr := strconv.ParseFloat(secs, 64)
			// The comparisons also refuse NaN; the duration is tested as
			// a float, before a conversion that would wrap.
			if !ok || ferr != nil || serr != nil || !(fv > 0 && fv <= 1) || !(sv > 0 && sv <= sim.MaxOverloadTrigger.Seconds()) ||
				time.Duration(sv*float64(time.Second)) <= 0 {
				fmt.Fprintf(stderr, "rebound sim: --cells %s: want %s\n", item, want)
				return nil, 2
			}
			c.Cells = append(c.Cells, sim.OverloadCell{Fraction: fv, Duration: time.Duration(sv * float64(time.Second))})
		}
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "rebound sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return nil, 2
	}
	strategies, cells := len(c.Strategies), len(c.Cells)
	if strategies == 0 {
		strategies = len(sim.OverloadStrategies())
	}
	if cells == 0 {
		cells = len(sim.DefaultOverloadCells())
	}
	runs := strategies * cells
	fmt.Fprintf(stderr, "rebound sim: overload scenario, seed %d, %d strategies in %d cells…\n", o.seed, strategies, cells)
	done := 0
	var clock progressClock
	clock.printed()
	c.Progress = func(p sim.OverloadProgress) {
		cell := fmt.Sprintf("f=%g Δt=%gs %s", p.Cell.Fraction, p.Cell.Duration.Seconds(), p.Strategy)
		if x := p.Result; x != nil {
			done++
			fmt.Fprintf(stderr, "rebound sim: [%d/%d] %s: goodput %.1f/s, amplification %.2f, recovery %s\n",
				done, runs, cell, x.Goodput, x.Amplification, recovery(*x))
			clock.printed()
		} else if clock.due() {
			fmt.Fprintf(stderr, "rebound sim: [%d/%d] %s: %.0f s of %.0f s simulated\n",
				done+1, runs, cell, p.Done.Seconds(), p.Of.Seconds())
		}
	}
	start := time.Now()
	r, err := sim.RunOverload(ctx, o.seed, c)
	if err != nil {
		fmt.Fprintf(stderr, "rebound sim: %v\n", err)
		return nil, 1
	}
	fmt.Fprintf(stderr, "rebound sim: done in %v\n", time.Since(start).Round(time.Millisecond))
	return r, 0
}

// printOverload prints each result, then the map: recovery time by cell
// and strategy.
func printOverload(w io.Writer, r sim.OverloadReport) {
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
	at := map[cell]map[string]sim.OverloadResult{}
	for _, x := range r.Results {
		c := cell{x.TriggerFraction, x.TriggerS}
		if at[c] == nil {
			at[c] = map[string]sim.OverloadResult{}
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

func recovery(x sim.OverloadResult) string {
	if !x.Recovered {
		return "never"
	}
	return fmt.Sprintf("%.0f s", x.RecoveryS)
}

// runPrioritySim runs the priority scenario.
func runPrioritySim(ctx context.Context, o simOptions, stderr io.Writer) (any, int) {
	c := sim.PriorityConfig{Strategies: o.strategies}
	if o.cells != "" {
		var err error
		if c.MaxPassOver, err = parseIntList(o.cells); err != nil {
			fmt.Fprintf(stderr, "rebound sim: --cells: %v\n", err)
			return nil, 2
		}
	}
	for _, m := range c.MaxPassOver {
		if err := intFlag("cells", m, 1, sim.MaxPriorityPassOver, fmt.Sprintf("MaxPassOver values from 1 to %d", sim.MaxPriorityPassOver)); err != nil {
			fmt.Fprintf(stderr, "rebound sim: %v\n", err)
			return nil, 2
		}
	}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "rebound sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return nil, 2
	}
	strategies := c.Strategies
	if len(strategies) == 0 {
		strategies = sim.PriorityStrategies()
	}
	runs := len(strategies)
	if slices.Contains(strategies, sim.PriorityClasses) {
		runs += max(len(c.MaxPassOver), 1) - 1
	}
	fmt.Fprintf(stderr, "rebound sim: priority scenario, seed %d, %d runs…\n", o.seed, runs)
	done := 0
	c.Progress = func(x sim.PriorityResult) {
		done++
		fmt.Fprintf(stderr, "rebound sim: [%d/%d] %s: interactive p99 %.0f ms, batch %d/%d\n",
			done, runs, x.Name(), x.InteractiveP99MS, x.BatchCompleted, sim.PriorityBatchRequests)
	}
	start := time.Now()
	r, err := sim.RunPriority(ctx, o.seed, c)
	if err != nil {
		fmt.Fprintf(stderr, "rebound sim: %v\n", err)
		return nil, 1
	}
	fmt.Fprintf(stderr, "rebound sim: done in %v\n", time.Since(start).Round(time.Millisecond))
	return r, 0
}

// printPriority prints each strategy's interactive latency and batch.
func printPriority(w io.Writer, r sim.PriorityReport) {
	fmt.Fprintf(w, "rebound sim --scenario priority, seed %d: provider %d calls at a time (%.1f/s), interactive at %.0f%% of it, "+
		"a batch of %d requests %d at a time from %.0f s\n\n", r.Seed, sim.PrioritySlots, sim.PriorityCapacity(),
		100*sim.PriorityInteractiveShare, sim.PriorityBatchRequests, sim.PriorityBatchConcurrency, sim.PriorityWarmup.Seconds())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tinteractive p50\tp99\tbatch completed\tbatch time\t")
	for _, x := range r.Results {
		batch, took := "—", "—"
		if x.Strategy != sim.PriorityNoFlood {
			batch = fmt.Sprintf("%d/%d", x.BatchCompleted, sim.PriorityBatchRequests)
			took = fmt.Sprintf("%.0f s", x.BatchS)
			if !x.BatchDone {
				took = "unfinished"
			}
		}
		fmt.Fprintf(tw, "%s\t%.2f s\t%.2f s\t%s\t%s\t\n", x.Name(), x.InteractiveP50MS/1000, x.InteractiveP99MS/1000, batch, took)
	}
	tw.Flush()
}
