package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/cliflag"
	"github.com/rebound-go/rebound/cmd/rebound/internal/sim"
)

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
	// config makes the scenario's configuration of the flags; an error
	// is bad usage, said in one line.
	config func(o simOptions) (simConfig, error)
}

// simConfig is a scenario's configuration, ready to run.
type simConfig interface {
	RunCommand(ctx context.Context, seed uint64, progress io.Writer) (sim.Report, error)
}

// simScenarios are the scenarios "rebound sim --scenario" accepts.
var simScenarios = []simScenario{
	{name: "occ", seed: 2015, trials: sim.DefaultOCCTrials, maxTrials: 10000, flags: []string{"clients", "strategies", "trials"}, config: occConfig},
	{name: "iid", seed: 1, trials: sim.DefaultIIDTrials, maxTrials: 10000000, flags: []string{"attempts", "trials"}, config: iidConfig},
	// One run per cell, or per strategy: the models are fixed.
	{name: "overload", seed: 1, trials: 1, maxTrials: 1, flags: []string{"strategies"}, config: overloadConfig},
	{name: "priority", seed: 1, trials: 1, maxTrials: 1, flags: []string{"strategies"}, config: priorityConfig},
	{name: "hedge", seed: 1, trials: sim.DefaultHedgeCalls, maxTrials: sim.MaxHedgeCalls, flags: []string{"trials"}, config: hedgeConfig},
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
				if item = strings.TrimSpace(item); item == "" {
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
	if code, done := parseFlags(fs, args, sim.Usage, stderr); done {
		return code
	}
	c, s, err := simConfigOf(fs, *scenario, &o)
	if err != nil {
		fmt.Fprintf(stderr, "rebound sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return 2
	}
	return runSimConfig(ctx, c, s, o, stdout, stderr)
}

// simConfigOf makes the configuration of the scenario named name from
// the flags of fs, filling in o's defaults; an error is bad usage.
func simConfigOf(fs *flag.FlagSet, name string, o *simOptions) (simConfig, simScenario, error) {
	i := slices.IndexFunc(simScenarios, func(s simScenario) bool { return s.name == name })
	if i < 0 {
		return nil, simScenario{}, fmt.Errorf("unknown scenario %q (want %s)", name, simScenarioNames())
	}
	s := simScenarios[i]
	owners := map[string][]string{}
	for _, sc := range simScenarios {
		for _, f := range sc.flags {
			owners[f] = append(owners[f], sc.name)
		}
	}
	if err := foreignFlag(fs, s.name, owners); err != nil {
		return nil, s, err
	}
	set := cliflag.Given(fs)
	if !set["seed"] {
		o.seed = s.seed
	}
	if !set["trials"] {
		o.trials = s.trials
	}
	if err := cliflag.Int("trials", o.trials, 1, s.maxTrials,
		fmt.Sprintf("a whole number from 1 to %d for the %s scenario", s.maxTrials, s.name)); err != nil {
		return nil, s, err
	}
	c, err := s.config(*o)
	return c, s, err
}

// runSimConfig runs c, the configuration of s, and prints its report:
// the page of charts first, if --html asks for one.
func runSimConfig(ctx context.Context, c simConfig, s simScenario, o simOptions, stdout, stderr io.Writer) int {
	var page *sim.Page
	if o.html != "" {
		// A page that cannot be written fails now, not after the run.
		var err error
		if page, err = sim.OpenPage(o.html); err != nil {
			fmt.Fprintf(stderr, "rebound sim: --html: %v\n", err)
			return 1
		}
	}
	report, err := c.RunCommand(ctx, o.seed, stderr)
	if err != nil {
		page.Discard()
		fmt.Fprintf(stderr, "rebound sim: %v\n", err)
		return 1
	}
	if page != nil {
		title := fmt.Sprintf("rebound sim --scenario %s, seed %d", s.name, o.seed)
		if o.trials > 1 {
			title += fmt.Sprintf(", %d trials", o.trials)
		}
		if err := page.Write(title, report.Charts()); err != nil {
			fmt.Fprintf(stderr, "rebound sim: --html: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "rebound sim: wrote %s\n", o.html)
	}
	if o.json {
		return printJSON(stdout, stderr, report)
	}
	report.WriteTable(stdout)
	return 0
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
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// occConfig makes the occ scenario's configuration: --clients (or
// --cells) are the client counts.
func occConfig(o simOptions) (simConfig, error) {
	c := sim.OCCConfig{Strategies: o.strategies, Trials: o.trials}
	var err error
	if o.cells != "" {
		if c.Clients, err = parseIntList(o.cells); err != nil {
			return nil, fmt.Errorf("--%s: %v", o.cellsFlag, err)
		}
	}
	for _, n := range c.Clients {
		if err := cliflag.Int(o.cellsFlag, n, 1, sim.MaxOCCClients,
			fmt.Sprintf("a positive whole number of clients up to %d", sim.MaxOCCClients)); err != nil {
			return nil, err
		}
	}
	return c, c.Validate()
}

// iidConfig makes the iid scenario's configuration: --cells are the
// failure probabilities.
func iidConfig(o simOptions) (simConfig, error) {
	c := sim.IIDConfig{Attempts: o.attempts, Trials: o.trials}
	var err error
	if o.cells != "" {
		if c.Rates, err = parseFloatList(o.cells); err != nil {
			return nil, fmt.Errorf("--cells: %v", err)
		}
	}
	for _, p := range c.Rates {
		if err := cliflag.Float("cells", p, 0, 1, "failure probabilities within [0, 1]"); err != nil {
			return nil, err
		}
	}
	for _, n := range c.Attempts {
		if err := cliflag.Int("attempts", n, 1, sim.MaxIIDAttempts, fmt.Sprintf("at least 1 and at most %d", sim.MaxIIDAttempts)); err != nil {
			return nil, err
		}
	}
	return c, c.Validate()
}

// overloadConfig makes the overload scenario's configuration: --cells are
// triggers, a fraction x seconds.
func overloadConfig(o simOptions) (simConfig, error) {
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
				return nil, fmt.Errorf("--cells %s: want %s", item, want)
			}
			c.Cells = append(c.Cells, sim.OverloadCell{Fraction: fv, Duration: time.Duration(sv * float64(time.Second))})
		}
	}
	return c, c.Validate()
}

// priorityConfig makes the priority scenario's configuration: --cells are
// the MaxPassOver values of its priority strategy.
func priorityConfig(o simOptions) (simConfig, error) {
	c := sim.PriorityConfig{Strategies: o.strategies}
	var err error
	if o.cells != "" {
		if c.MaxPassOver, err = parseIntList(o.cells); err != nil {
			return nil, fmt.Errorf("--cells: %v", err)
		}
	}
	for _, m := range c.MaxPassOver {
		if err := cliflag.Int("cells", m, 1, sim.MaxPriorityPassOver, fmt.Sprintf("MaxPassOver values from 1 to %d", sim.MaxPriorityPassOver)); err != nil {
			return nil, err
		}
	}
	return c, c.Validate()
}

// hedgeConfig makes the hedge scenario's configuration: --trials is the
// number of calls.
func hedgeConfig(o simOptions) (simConfig, error) {
	if o.cells != "" {
		return nil, fmt.Errorf("--%s does not apply to the hedge scenario: its model is fixed", o.cellsFlag)
	}
	c := sim.HedgeConfig{Calls: o.trials}
	return c, c.Validate()
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
