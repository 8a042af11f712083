package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/rebound-go/rebound/cmd/rebound/internal/bench"
	"github.com/rebound-go/rebound/cmd/rebound/internal/cliflag"
	"github.com/rebound-go/rebound/cmd/rebound/internal/sim"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	seed := fs.Uint64("seed", 1, "seed of the chaos server's outcomes and of every jitter draw")
	scenario := fs.String("scenario", "seed", "`seed` (the 429 article's experiments), cost (a simulated month) or cache (conversations through a pool of keys of a provider that caches prompts)")
	var w sim.CostWorkload
	fs.IntVar(&w.Days, "days", 30, "cost: days of traffic")
	fs.IntVar(&w.TasksPerDay, "tasks-per-day", 2000, "cost: tasks a day")
	fs.IntVar(&w.MinCalls, "min-calls", 3, "cost: fewest LLM calls in a task")
	fs.IntVar(&w.MaxCalls, "max-calls", 5, "cost: most LLM calls in a task")
	fs.IntVar(&w.InputTokens, "input-tokens", 2000, "cost: input tokens of a call")
	fs.IntVar(&w.OutputTokens, "output-tokens", 500, "cost: output tokens of a call")
	fs.Float64Var(&w.PermanentRate, "permanent-rate", 0.02, "cost: share of calls that fail with a permanent 4xx (0 for none)")
	fs.Float64Var(&w.RateLimitRate, "rate-limit-rate", 0.015, "cost: chance an attempt meets a 429 (0 for none)")
	fs.Float64Var(&w.ServerErrorRate, "server-error-rate", 0.015, "cost: chance an attempt meets a 5xx (0 for none)")
	fs.Float64Var(&w.IncidentsPerDay, "incidents-per-day", 1.5, "cost: mean provider incidents (529s) a day (0 for none)")
	if code, done := parseFlags(fs, args, bench.Usage, stderr); done {
		return code
	}
	if *scenario != "seed" && *scenario != "cost" && *scenario != "cache" {
		fmt.Fprintf(stderr, "rebound bench: unknown scenario %q (want seed, cost or cache)\n", *scenario)
		return 2
	}
	// The flags whose usage starts "cost: " are the cost scenario's.
	costFlags := map[string][]string{}
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "cost: ") {
			costFlags[f.Name] = []string{"cost"}
		}
	})
	if err := foreignFlag(fs, *scenario, costFlags); err != nil {
		fmt.Fprintf(stderr, "rebound bench: %v\n", err)
		return 2
	}
	if *scenario == "cost" {
		return runCostBench(ctx, *seed, w, *asJSON, stdout, stderr)
	}
	if *scenario == "cache" {
		r, err := bench.RunCache(ctx, *seed, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "rebound bench: cache scenario stopped: %v\n", err)
			return 1
		}
		if *asJSON {
			return printJSON(stdout, stderr, r)
		}
		r.WriteTable(stdout)
		return 0
	}
	report, err := bench.Run(ctx, *seed, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rebound bench: %v\n", err)
		return 1
	}
	if *asJSON {
		return printJSON(stdout, stderr, report)
	}
	report.WriteTable(stdout)
	return 0
}

// checkCostFlags returns a one-line reason if a flag of the cost
// scenario is out of its range, and otherwise w as sim.RunCost takes it.
func checkCostFlags(w sim.CostWorkload) (sim.CostWorkload, error) {
	prob := "a probability from 0 to 1"
	for _, err := range []error{
		cliflag.Int("days", w.Days, 1, sim.MaxCostDays, fmt.Sprintf("a whole number of days from 1 to %d", sim.MaxCostDays)),
		cliflag.Int("tasks-per-day", w.TasksPerDay, 1, sim.MaxCostTasksPerDay,
			fmt.Sprintf("a whole number of tasks from 1 to %d", sim.MaxCostTasksPerDay)),
		cliflag.Int("min-calls", w.MinCalls, 1, sim.MaxCostCalls, fmt.Sprintf("a whole number of calls from 1 to %d", sim.MaxCostCalls)),
		cliflag.Int("max-calls", w.MaxCalls, w.MinCalls, sim.MaxCostCalls,
			fmt.Sprintf("a whole number of calls from --min-calls (%d) to %d", w.MinCalls, sim.MaxCostCalls)),
		cliflag.Int("input-tokens", w.InputTokens, 1, sim.MaxCostTokens, fmt.Sprintf("a whole number of tokens from 1 to %d", sim.MaxCostTokens)),
		cliflag.Int("output-tokens", w.OutputTokens, 1, sim.MaxCostTokens, fmt.Sprintf("a whole number of tokens from 1 to %d", sim.MaxCostTokens)),
		cliflag.Float("permanent-rate", w.PermanentRate, 0, 1, prob),
		cliflag.Float("rate-limit-rate", w.RateLimitRate, 0, 1, prob),
		cliflag.Float("server-error-rate", w.ServerErrorRate, 0, 1, prob),
		cliflag.Float("incidents-per-day", w.IncidentsPerDay, 0, math.MaxFloat64, "a finite number, at least 0 (0 for none)"),
	} {
		if err != nil {
			return w, err
		}
	}
	if w.RateLimitRate+w.ServerErrorRate > 1 {
		return w, fmt.Errorf("--rate-limit-rate %v and --server-error-rate %v: want two chances that add up to at most 1",
			w.RateLimitRate, w.ServerErrorRate)
	}
	// To sim, zero means the default and below zero none.
	for _, v := range []*float64{&w.PermanentRate, &w.RateLimitRate, &w.ServerErrorRate, &w.IncidentsPerDay} {
		if *v == 0 {
			*v = -1
		}
	}
	return w, w.Validate()
}

// runCostBench runs the cost scenario and prints its table or JSON.
func runCostBench(ctx context.Context, seed uint64, w sim.CostWorkload, asJSON bool, stdout, stderr io.Writer) int {
	w, err := checkCostFlags(w)
	if err != nil {
		fmt.Fprintf(stderr, "rebound bench: %s\n", strings.TrimPrefix(err.Error(), "sim: "))
		return 2
	}
	r, err := w.RunCommand(ctx, seed, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "rebound bench: cost scenario stopped: %v\n", err)
		return 1
	}
	if asJSON {
		return printJSON(stdout, stderr, r)
	}
	r.WriteTable(stdout, w)
	return 0
}
