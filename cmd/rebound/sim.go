package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rebound-go/rebound/sim"
)

const simUsage = `usage: rebound sim [--scenario occ] [--json] [--seed N] [--trials N]
                   [--clients N,N,...] [--strategies S,S,...]

Run a simulation in virtual time through rebound's real retry decisions (a
rebound.Loop per simulated client), and print ours beside the published
figures. The same seed gives the same numbers.

--scenario occ (the default) re-runs Brooker's optimistic-concurrency
experiment ("Exponential Backoff and Jitter", AWS Architecture Blog, 2015):
N clients read a versioned row and write it back, a write succeeding only if
the version is still current, each client retrying after backoff until its
write succeeds; every network hop takes |Normal(10 ms, 2 ms)|. For each
strategy (exponential, decorrelated, equal, full, none) and each client
count it reports the mean writes and completion time over --trials trials.
--cells is another name for --clients in this scenario.

flags:
`

// simOptions are the parsed flags of "rebound sim", for every scenario.
type simOptions struct {
	json       bool
	seed       uint64
	trials     int
	clients    []int    // nil: the scenario's default
	strategies []string // nil: the scenario's default
}

// simScenario is one scenario of "rebound sim".
type simScenario struct {
	name string
	run  func(ctx context.Context, o simOptions, stdout, stderr io.Writer) int
}

// simScenarios are the scenarios "rebound sim --scenario" accepts.
var simScenarios = []simScenario{
	{"occ", runOCCSim},
}

func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	var o simOptions
	scenario := fs.String("scenario", "occ", "the simulation to run: "+simScenarioNames())
	fs.BoolVar(&o.json, "json", false, "print one JSON object instead of a table")
	fs.Uint64Var(&o.seed, "seed", 2015, "seed of every random draw")
	fs.IntVar(&o.trials, "trials", sim.DefaultOCCTrials, "trials each figure averages over")
	var clientsFrom string
	clients := func(name string) func(string) error {
		return func(s string) error {
			if clientsFrom != "" && clientsFrom != name {
				return fmt.Errorf("--cells is another name for --clients: give one of them")
			}
			clientsFrom = name
			var err error
			o.clients, err = parseIntList(s)
			return err
		}
	}
	fs.Func("clients", "comma-separated client counts (default 10,20,50,100,150,190)", clients("clients"))
	fs.Func("cells", "the same as --clients", clients("cells"))
	fs.Func("strategies", "comma-separated strategies (default all of "+strings.Join(sim.OCCStrategies(), ",")+")",
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
	if code, done := parseFlags(fs, args, simUsage, stderr); done {
		return code
	}
	if o.trials < 1 {
		fmt.Fprintf(stderr, "rebound sim: --trials must be at least 1 (got %d)\n", o.trials)
		return 2
	}
	for _, s := range simScenarios {
		if s.name == *scenario {
			return s.run(ctx, o, stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "rebound sim: unknown scenario %q (want %s)\n", *scenario, simScenarioNames())
	return 2
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

// runOCCSim runs the occ scenario and prints its table or JSON.
func runOCCSim(ctx context.Context, o simOptions, stdout, stderr io.Writer) int {
	c := sim.OCCConfig{Strategies: o.strategies, Clients: o.clients, Trials: o.trials}
	if err := c.Validate(); err != nil {
		fmt.Fprintf(stderr, "rebound sim: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return 2
	}
	strategies, clients := len(c.Strategies), len(c.Clients)
	if strategies == 0 {
		strategies = len(sim.OCCStrategies())
	}
	if clients == 0 {
		clients = len(sim.DefaultOCCClients)
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
		return 1
	}
	fmt.Fprintf(stderr, "rebound sim: done in %v\n", time.Since(start).Round(time.Millisecond))
	if o.json {
		return printJSON(stdout, stderr, r)
	}
	printOCC(stdout, r)
	return 0
}

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
