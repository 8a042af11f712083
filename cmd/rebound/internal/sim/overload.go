package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/ratelimit"
)

// The overload scenario's fixed model (the issue that asked for it fixes
// it, so that results stay comparable): one provider serving attempts
// first in, first out at Capacity a second; unique calls arriving as a
// Poisson stream at Arrivals a second, each with a deadline of
// CallDeadline and each attempt a timeout of AttemptTimeout; an attempt
// the client gave up on is still served when it reaches the front of the
// queue. After Warmup, a trigger drops capacity to a fraction for a while;
// the run goes on for ten times the trigger's length after it.
const (
	OverloadCapacity       = 100.0
	OverloadArrivals       = 90.0
	OverloadCallDeadline   = 5 * time.Second
	OverloadAttemptTimeout = time.Second
	OverloadWarmup         = 30 * time.Second
	// recoveryWindow is how long goodput must hold at 90% of arrivals
	// for the provider to count as recovered.
	recoveryWindow = 5
)

// Overload strategies.
const (
	OverloadNone    = "none"    // no retries
	OverloadRetry3  = "retry3"  // 3 retries, full jitter from 100 ms, cap 5 s
	OverloadBudget  = "budget"  // retry3 and a retry budget
	OverloadRebound = "rebound" // the recommended setup: retry budget and adaptive limits
)

// OverloadStrategies returns the strategies in report order.
func OverloadStrategies() []string {
	return []string{OverloadNone, OverloadRetry3, OverloadBudget, OverloadRebound}
}

// OverloadCell is one trigger: capacity falls to Fraction for Duration.
type OverloadCell struct {
	Fraction float64
	Duration time.Duration
}

// MaxOverloadTrigger is the longest trigger RunOverload takes: the run
// goes on for ten times the trigger after it, and counts each second.
const MaxOverloadTrigger = time.Hour

// DefaultOverloadCells are f ∈ {0.1, 0.5} × Δt ∈ {5, 10, 30} s.
func DefaultOverloadCells() []OverloadCell {
	var cells []OverloadCell
	for _, f := range []float64{0.1, 0.5} {
		for _, d := range []time.Duration{5 * time.Second, 10 * time.Second, 30 * time.Second} {
			cells = append(cells, OverloadCell{Fraction: f, Duration: d})
		}
	}
	return cells
}

// OverloadResult is one strategy in one cell.
type OverloadResult struct {
	Strategy        string  `json:"strategy"`
	TriggerFraction float64 `json:"trigger_fraction"`
	TriggerS        float64 `json:"trigger_s"`
	// Goodput is successful calls a second over the whole run.
	Goodput float64 `json:"goodput"`
	// Amplification is attempts that reached the provider per unique call.
	Amplification float64 `json:"amplification"`
	SuccessRate   float64 `json:"success_rate"`
	Recovered     bool    `json:"recovered"`
	// RecoveryS is the time from the trigger's end to the first second
	// from which goodput over the next 5 s reaches 90% of arrivals; -1 if
	// never.
	RecoveryS float64 `json:"recovery_s"`
	// GoodputBySecond is successful calls in each second of the run, for
	// charts.
	GoodputBySecond []int `json:"goodput_by_second"`
}

// OverloadReport is the result of RunOverload.
type OverloadReport struct {
	Scenario string           `json:"scenario"`
	Seed     uint64           `json:"seed"`
	Results  []OverloadResult `json:"results"`
}

// OverloadConfig narrows the overload scenario. Its zero value runs every
// strategy in every cell of DefaultOverloadCells.
type OverloadConfig struct {
	// Strategies to run, in this order. Empty means OverloadStrategies().
	Strategies []string
	// Cells to run, in this order, each a fraction in (0, 1] for at most
	// MaxOverloadTrigger. Empty means DefaultOverloadCells().
	Cells []OverloadCell
	// Progress, if set, is told where the run is: after each simulated
	// minute of a strategy in a cell, and with its result once done.
	Progress func(OverloadProgress)
}

// OverloadProgress is where a RunOverload is.
type OverloadProgress struct {
	Strategy string
	Cell     OverloadCell
	// Done is the virtual time of the strategy in the cell simulated so
	// far, out of Of.
	Done, Of time.Duration
	// Result is the strategy's result in the cell once done; nil before.
	Result *OverloadResult
}

// Validate reports the first thing wrong with c, in one line.
func (c OverloadConfig) Validate() error {
	for _, s := range c.Strategies {
		if !slices.Contains(OverloadStrategies(), s) {
			return fmt.Errorf("sim: unknown overload strategy %q (want one of %v)", s, OverloadStrategies())
		}
	}
	for _, cell := range c.Cells {
		if !(cell.Fraction > 0 && cell.Fraction <= 1) || cell.Duration <= 0 || cell.Duration > MaxOverloadTrigger { // also refuses NaN
			return fmt.Errorf("sim: a trigger needs a fraction in (0, 1] and a duration in (0, %v] (got %v for %v)",
				MaxOverloadTrigger, cell.Fraction, cell.Duration)
		}
	}
	return nil
}

// RunOverload runs every strategy in every cell. Each (strategy, cell)
// has its own generator, so narrowing a run does not change the figures
// of what remains. It stops with ctx's cause soon after ctx is done, within
// a few thousand simulated events.
func RunOverload(ctx context.Context, seed uint64, c OverloadConfig) (OverloadReport, error) {
	if err := c.Validate(); err != nil {
		return OverloadReport{}, err
	}
	strategies, cells := c.Strategies, c.Cells
	if len(strategies) == 0 {
		strategies = OverloadStrategies()
	}
	if len(cells) == 0 {
		cells = DefaultOverloadCells()
	}
	report := OverloadReport{Scenario: "overload", Seed: seed}
	for _, cell := range cells {
		for _, s := range strategies {
			i := slices.Index(OverloadStrategies(), s) // not the place in strategies: narrowing changes no figure
			rng := rand.New(rand.NewPCG(seed, uint64(i)<<32|uint64(cell.Fraction*1000)<<16|uint64(cell.Duration/time.Second)))
			o, err := newOverload(s, cell, rng)
			if err != nil {
				return OverloadReport{}, err
			}
			var minute func(time.Duration)
			if c.Progress != nil {
				minute = func(done time.Duration) {
					c.Progress(OverloadProgress{Strategy: s, Cell: cell, Done: done, Of: o.end.Sub(o.start)})
				}
			}
			r, err := o.run(ctx, minute)
			if err != nil {
				return OverloadReport{}, err
			}
			report.Results = append(report.Results, r)
			if c.Progress != nil {
				c.Progress(OverloadProgress{Strategy: s, Cell: cell, Done: o.end.Sub(o.start), Of: o.end.Sub(o.start), Result: &r})
			}
		}
	}
	return report, nil
}

// An overload simulation: the provider and the arrivals are events in
// virtual time; each call is a proc that runs rebound.Run, whose attempts
// wait for a slot of the adaptive limit (if any), join the provider's
// queue and wait for the answer or their timeout.
type overload struct {
	strategy string
	cell     OverloadCell
	rng      *rand.Rand
	policy   rebound.Policy      // with the strategy's retry budget, if any
	adaptive *ratelimit.Adaptive // nil: none

	scheduler
	start, end time.Time

	// The provider.
	queue []*attempt // attempts waiting, first in, first out
	busy  bool

	// The client's side of the adaptive limit: its calls waiting for a
	// slot. Nil with no limit.
	gate *gate[*ocall]

	calls, succeeded, attempts int
	goodput                    []int
}

// ocall is one unique call.
type ocall struct {
	deadline time.Time
	proc     *proc // the call, running rebound.Run
	// dropped: when its turn for a slot came, too little time was left
	// to be answered.
	dropped bool
}

// attempt is one attempt of a call, sent to the provider.
type attempt struct {
	call     *ocall
	sentAt   time.Time
	answered bool // the client got its answer
	timedOut bool // the client stopped waiting
	holds    bool // it holds a slot of the adaptive limit
}

// errAttemptTimeout is how an attempt the provider did not answer within
// OverloadAttemptTimeout fails: a transient error, as a timeout is.
var errAttemptTimeout = errors.New("sim: the attempt timed out")

func newOverload(strategy string, cell OverloadCell, rng *rand.Rand) (*overload, error) {
	o := &overload{strategy: strategy, cell: cell, rng: rng}
	o.start = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	o.clock = NewClock(o.start)
	o.end = o.start.Add(OverloadWarmup + cell.Duration + 10*cell.Duration)
	retry3 := rebound.Policy{MaxAttempts: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second,
		WaitBudget: time.Hour, Rand: rng}
	switch strategy {
	case OverloadNone:
		o.policy = rebound.Policy{MaxAttempts: 1}
	case OverloadRetry3:
		o.policy = retry3
	case OverloadBudget:
		o.policy = retry3
		o.policy.Budget = &rebound.RetryBudget{}
	case OverloadRebound:
		o.policy = rebound.Policy{Rand: rng, Budget: &rebound.RetryBudget{}} // the recommended one
		o.adaptive = ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Clock: o.clock})
		o.gate = newGate[*ocall](o.adaptive, ratelimit.DefaultMaxPassOver)
	default:
		return nil, fmt.Errorf("sim: unknown overload strategy %q (want one of %v)", strategy, OverloadStrategies())
	}
	return o, nil
}

// capacity is the provider's rate at t.
func (o *overload) capacity(t time.Time) float64 {
	from := o.start.Add(OverloadWarmup)
	if !t.Before(from) && t.Before(from.Add(o.cell.Duration)) {
		return OverloadCapacity * o.cell.Fraction
	}
	return OverloadCapacity
}

// run runs the simulation, telling minute (if set) of each simulated
// minute done. It stops with ctx's cause when ctx is done, checked every
// few thousand events.
func (o *overload) run(ctx context.Context, minute func(done time.Duration)) (OverloadResult, error) {
	defer o.endProcs()
	o.goodput = make([]int, int(o.end.Sub(o.start)/time.Second)) // whole seconds only
	o.at(o.start.Add(o.interarrival()), o.arrive)
	if err := o.runUntil(ctx, o.start, o.end, minute); err != nil {
		return OverloadResult{}, err
	}
	return o.result(), nil
}

func (o *overload) interarrival() time.Duration {
	return time.Duration(o.rng.ExpFloat64() / OverloadArrivals * float64(time.Second))
}

// arrive starts a new call and schedules the next arrival.
func (o *overload) arrive() {
	o.calls++
	now := o.clock.Now()
	c := &ocall{deadline: now.Add(OverloadCallDeadline)}
	o.spawn(c.deadline, func(ctx context.Context) {
		c.proc = o.self()
		if rebound.Run(ctx, o.policy, func(context.Context) error { return o.attempt(c) }) == nil {
			o.succeeded++
			if s := int(o.clock.Now().Sub(o.start) / time.Second); s < len(o.goodput) {
				o.goodput[s]++
			}
		}
	})
	o.at(now.Add(o.interarrival()), o.arrive)
}

// attempt is one attempt of c, made by c's proc: it waits for a slot of
// the adaptive limit, if any, then for the provider's answer or its
// timeout.
func (o *overload) attempt(c *ocall) error {
	if o.gate != nil && !o.gate.enter(ratelimit.Interactive, c) {
		if !o.park() {
			return errSimulationEnded
		}
		if c.dropped {
			c.dropped = false
			return ratelimit.ErrDeadline // as Adaptive.Acquire says it
		}
	}
	now := o.clock.Now()
	a := &attempt{call: c, sentAt: now, holds: o.adaptive != nil}
	o.attempts++
	o.queue = append(o.queue, a)
	o.serve()
	timeout := min(OverloadAttemptTimeout, c.deadline.Sub(now))
	o.at(now.Add(timeout), func() { o.timeout(a) })
	if !o.park() {
		return errSimulationEnded
	}
	if a.answered {
		return nil
	}
	return errAttemptTimeout
}

// errSimulationEnded is what an attempt still waiting when the
// simulation ends returns; its call's context is canceled by then.
var errSimulationEnded = errors.New("sim: the simulation ended")

// serve starts serving the head of the provider's queue if it is idle.
func (o *overload) serve() {
	if o.busy || len(o.queue) == 0 {
		return
	}
	a := o.queue[0]
	o.queue = o.queue[1:]
	o.busy = true
	service := time.Duration(float64(time.Second) / o.capacity(o.clock.Now()))
	o.at(o.clock.Now().Add(service), func() {
		o.busy = false
		o.served(a)
		o.serve()
	})
}

// served answers a; the client gets it if it is still waiting.
func (o *overload) served(a *attempt) {
	if a.timedOut {
		return // work done for a client who had left
	}
	a.answered = true
	o.release(a, ratelimit.Success)
	o.resume(a.call.proc)
}

// timeout ends an attempt the provider has not answered in time.
func (o *overload) timeout(a *attempt) {
	if a.answered {
		return
	}
	a.timedOut = true
	o.release(a, ratelimit.Congested)
	o.resume(a.call.proc)
}

// release gives a's slot back and hands free slots to waiting calls,
// oldest first; one whose deadline is too near is told so instead (as
// Adaptive.Acquire's ErrDeadline), never sent.
func (o *overload) release(a *attempt, s ratelimit.Signal) {
	if !a.holds {
		return
	}
	a.holds = false
	latency := time.Duration(0)
	if s == ratelimit.Success {
		latency = o.clock.Now().Sub(a.sentAt)
	}
	o.gate.release(s, latency, func(c *ocall) bool {
		// Too late to be answered in time, as Adaptive.Acquire judges.
		return c.deadline.Sub(o.clock.Now()) < max(o.adaptive.Expected(), time.Nanosecond)
	}, func(c *ocall) {
		c.dropped = true
		o.resume(c.proc)
	}, func(c *ocall) { o.resume(c.proc) })
}

func (o *overload) result() OverloadResult {
	r := OverloadResult{
		Strategy: o.strategy, TriggerFraction: o.cell.Fraction, TriggerS: o.cell.Duration.Seconds(),
		Goodput:       float64(o.succeeded) / o.end.Sub(o.start).Seconds(),
		Amplification: float64(o.attempts) / float64(max(o.calls, 1)),
		SuccessRate:   float64(o.succeeded) / float64(max(o.calls, 1)),
		RecoveryS:     -1, GoodputBySecond: o.goodput,
	}
	triggerEnd := int((OverloadWarmup + o.cell.Duration) / time.Second)
	for s := triggerEnd; s+recoveryWindow <= len(o.goodput); s++ {
		sum := 0
		for _, g := range o.goodput[s : s+recoveryWindow] {
			sum += g
		}
		if float64(sum) >= 0.9*OverloadArrivals*recoveryWindow {
			r.Recovered, r.RecoveryS = true, float64(s-triggerEnd)
			break
		}
	}
	r.Goodput = math.Round(r.Goodput*100) / 100
	return r
}

// Charts draws goodput over time around each cell's trigger, a line per
// strategy, with the arrival rate dashed: where a line stays under it after
// the trigger, the strategy has not recovered.
func (r OverloadReport) Charts() []Chart {
	type key struct{ f, d float64 }
	var order []key
	byCell := map[key][]OverloadResult{}
	for _, x := range r.Results {
		k := key{x.TriggerFraction, x.TriggerS}
		if _, ok := byCell[k]; !ok {
			order = append(order, k)
		}
		byCell[k] = append(byCell[k], x)
	}
	warmup := OverloadWarmup.Seconds()
	var charts []Chart
	for _, k := range order {
		c := Chart{
			Title:  fmt.Sprintf("Capacity down to %.0f%% for %.0f s", 100*k.f, k.d),
			XLabel: "seconds from the trigger", YLabel: "successful calls a second",
			Caption: fmt.Sprintf("The trigger runs from 0 to %.0f s; arrivals are %.0f a second (dashed).", k.d, OverloadArrivals),
		}
		for _, x := range byCell[k] {
			s := Series{Name: x.Strategy}
			for sec, g := range x.GoodputBySecond {
				if t := float64(sec) - warmup; t >= -10 {
					s.Points = append(s.Points, Point{X: t, Y: float64(g)})
				}
			}
			c.Series = append(c.Series, s)
		}
		last := c.Series[0].Points[len(c.Series[0].Points)-1].X
		c.Series = append(c.Series, Series{Name: "arrivals", Color: "#7f7f7f", Dashed: true,
			Points: []Point{{X: -10, Y: OverloadArrivals}, {X: last, Y: OverloadArrivals}}})
		charts = append(charts, c)
	}
	return charts
}
