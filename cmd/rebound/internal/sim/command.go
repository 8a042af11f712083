package sim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// The simulations as "rebound sim" and "rebound bench --scenario cost" run
// them: each RunCommand tells progress on a writer (the command's stderr),
// a line at a time, prefixed with the command's name, and returns the
// report, whose WriteTable the command prints or whose JSON it encodes.

// Report is what a simulation returns: a table, and charts for --html.
type Report interface {
	WriteTable(w io.Writer)
	Charts() []Chart
}

// The most that "rebound sim" lets a run ask for.
const (
	// MaxOCCClients is the most clients of an occ cell: the writes of a
	// trial grow faster than the square of the clients, and a cell tells
	// its progress only when its trials are done.
	MaxOCCClients = 1000
	// MaxIIDAttempts is the most attempts of an iid policy: at p = 1
	// every call makes them all, and a cell is checked for cancellation
	// only between calls.
	MaxIIDAttempts = 100
)

// ProgressEvery is the least wall time between two lines telling that a
// long run is still under way: a long run is never silent for long, and a
// short one tells only what it finished.
var ProgressEvery = time.Second

// progressClock says when a line telling that a run is still under way
// is due.
type progressClock struct{ last time.Time }

// due reports whether such a line is due now, and if so counts it.
func (p *progressClock) due() bool {
	now := time.Now()
	if now.Sub(p.last) < ProgressEvery {
		return false
	}
	p.last = now
	return true
}

// printed notes a line just printed, so the next one waits its turn.
func (p *progressClock) printed() { p.last = time.Now() }

// timed runs run, then tells progress how long it took.
func timed[R any](progress io.Writer, run func() (R, error)) (R, error) {
	start := time.Now()
	r, err := run()
	if err == nil {
		fmt.Fprintf(progress, "rebound sim: done in %v\n", time.Since(start).Round(time.Millisecond))
	}
	return r, err
}

// RunCommand runs c as "rebound sim --scenario occ" does.
func (c OCCConfig) RunCommand(ctx context.Context, seed uint64, progress io.Writer) (Report, error) {
	strategies, clients, trials := len(c.Strategies), len(c.Clients), c.Trials
	if strategies == 0 {
		strategies = len(OCCStrategies())
	}
	if clients == 0 {
		clients = len(DefaultOCCClients())
	}
	if trials == 0 {
		trials = DefaultOCCTrials
	}
	cells := strategies * clients
	fmt.Fprintf(progress, "rebound sim: occ scenario, seed %d, %d trials of %d cells…\n", seed, trials, cells)
	done := 0
	c.Progress = func(r OCCResult) {
		done++
		fmt.Fprintf(progress, "rebound sim: [%d/%d] %s, %d clients: %.1f writes, %.2f s\n",
			done, cells, r.Strategy, r.Clients, r.Writes, r.CompletionMS/1000)
	}
	return timed(progress, func() (Report, error) { return RunOCC(ctx, seed, c) })
}

// RunCommand runs c as "rebound sim --scenario iid" does.
func (c IIDConfig) RunCommand(ctx context.Context, seed uint64, progress io.Writer) (Report, error) {
	attempts, rates, trials := len(c.Attempts), len(c.Rates), c.Trials
	if attempts == 0 {
		attempts = len(DefaultIIDAttempts())
	}
	if rates == 0 {
		rates = len(DefaultIIDRates())
	}
	if trials == 0 {
		trials = DefaultIIDTrials
	}
	cells := attempts * rates
	fmt.Fprintf(progress, "rebound sim: iid scenario, seed %d, %d calls in each of %d cells…\n", seed, trials, cells)
	done := 0
	c.Progress = func(r IIDResult) {
		done++
		fmt.Fprintf(progress, "rebound sim: [%d/%d] %d attempts, p = %g: success %.4f, load %.3f\n",
			done, cells, r.MaxAttempts, r.P, r.Success, r.Load)
	}
	return timed(progress, func() (Report, error) { return RunIID(ctx, seed, c) })
}

// RunCommand runs c as "rebound sim --scenario overload" does: a line for
// each strategy in each cell, and one every ProgressEvery while one runs.
func (c OverloadConfig) RunCommand(ctx context.Context, seed uint64, progress io.Writer) (Report, error) {
	strategies, cells := len(c.Strategies), len(c.Cells)
	if strategies == 0 {
		strategies = len(OverloadStrategies())
	}
	if cells == 0 {
		cells = len(DefaultOverloadCells())
	}
	runs := strategies * cells
	fmt.Fprintf(progress, "rebound sim: overload scenario, seed %d, %d strategies in %d cells…\n", seed, strategies, cells)
	done := 0
	var clock progressClock
	clock.printed()
	c.Progress = func(p OverloadProgress) {
		cell := fmt.Sprintf("f=%g Δt=%gs %s", p.Cell.Fraction, p.Cell.Duration.Seconds(), p.Strategy)
		if x := p.Result; x != nil {
			done++
			fmt.Fprintf(progress, "rebound sim: [%d/%d] %s: goodput %.1f/s, amplification %.2f, recovery %s\n",
				done, runs, cell, x.Goodput, x.Amplification, recovery(*x))
			clock.printed()
		} else if clock.due() {
			fmt.Fprintf(progress, "rebound sim: [%d/%d] %s: %.0f s of %.0f s simulated\n",
				done+1, runs, cell, p.Done.Seconds(), p.Of.Seconds())
		}
	}
	return timed(progress, func() (Report, error) { return RunOverload(ctx, seed, c) })
}

// RunCommand runs c as "rebound sim --scenario priority" does.
func (c PriorityConfig) RunCommand(ctx context.Context, seed uint64, progress io.Writer) (Report, error) {
	strategies := c.Strategies
	if len(strategies) == 0 {
		strategies = PriorityStrategies()
	}
	runs := len(strategies)
	if slices.Contains(strategies, PriorityClasses) {
		runs += max(len(c.MaxPassOver), 1) - 1
	}
	fmt.Fprintf(progress, "rebound sim: priority scenario, seed %d, %d runs…\n", seed, runs)
	done := 0
	c.Progress = func(x PriorityResult) {
		done++
		fmt.Fprintf(progress, "rebound sim: [%d/%d] %s: interactive p99 %.0f ms, batch %d/%d\n",
			done, runs, x.Name(), x.InteractiveP99MS, x.BatchCompleted, PriorityBatchRequests)
	}
	return timed(progress, func() (Report, error) { return RunPriority(ctx, seed, c) })
}

// RunCommand runs c as "rebound sim --scenario hedge" does.
func (c HedgeConfig) RunCommand(ctx context.Context, seed uint64, progress io.Writer) (Report, error) {
	calls := c.Calls
	if calls == 0 {
		calls = DefaultHedgeCalls
	}
	fmt.Fprintf(progress, "rebound sim: hedge scenario, seed %d, %d calls without and with a hedge…\n", seed, calls)
	c.Progress = func(r HedgeResult) {
		fmt.Fprintf(progress, "rebound sim: %s: p50 %.0f ms, p99 %.0f ms, %.1f%% hedged, %+.2f%% spend\n",
			r.Strategy, r.P50MS, r.P99MS, 100*r.Hedged, 100*r.ExtraSpend)
	}
	return timed(progress, func() (Report, error) { return RunHedge(ctx, seed, c) })
}

// RunCommand runs the cost scenario of w as "rebound bench --scenario
// cost" does: a line for each strategy, and one every ProgressEvery while
// one runs.
func (w CostWorkload) RunCommand(ctx context.Context, seed uint64, progress io.Writer) (CostReport, error) {
	d := w.withDefaults()
	fmt.Fprintf(progress, "rebound bench: cost scenario, seed %d, %d days of %d tasks…\n", seed, d.Days, d.TasksPerDay)
	start := time.Now()
	var clock progressClock
	clock.printed()
	strategy, strategies, strategyStart := 0, len(CostStrategies()), start
	r, err := RunCost(ctx, seed, w, func(p CostProgress) {
		if p.Result == nil {
			if clock.due() {
				fmt.Fprintf(progress, "rebound bench: [%d/%d] %s: day %d of %d\n", strategy+1, strategies, p.Strategy, p.Day, p.Days)
			}
			return
		}
		strategy++
		s := p.Result
		fmt.Fprintf(progress, "rebound bench: [%d/%d] %s: %d requests, %.2f%% of tasks succeeded, $%.5f per successful task, %v\n",
			strategy, strategies, s.Name, s.Requests, 100*s.SuccessRate, s.CostPerSuccessUSD, time.Since(strategyStart).Round(time.Millisecond))
		clock.printed()
		strategyStart = time.Now()
	})
	if err != nil {
		return r, err
	}
	fmt.Fprintf(progress, "rebound bench: done in %v\n", time.Since(start).Round(time.Millisecond))
	return r, nil
}
