package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rebound-go/rebound/ratelimit"
)

// The priority scenario's fixed model: a provider serving Slots calls at a
// time, each for a time drawn from a log-normal distribution (median
// ServiceMedian, σ ServiceSigma of its logarithm: a long tail, as LLM
// answers have), behind an Adaptive limit of Slots (as a batch.Runner
// sizes its own), told of each call's end as ratelimit.Transport tells it
// (no latencies). Interactive calls arrive as a Poisson stream at
// InteractiveShare of the provider's capacity. After Warmup a batch of
// BatchRequests starts, sent BatchConcurrency at a time as a
// batch.Runner sends them. The run lasts Duration.
const (
	PrioritySlots            = 16
	PriorityServiceMedian    = time.Second
	PriorityServiceSigma     = 0.5
	PriorityInteractiveShare = 0.6
	PriorityBatchRequests    = 3000
	PriorityBatchConcurrency = 64
	PriorityWarmup           = time.Minute
	PriorityDuration         = 20 * time.Minute
)

// Priority strategies.
const (
	PriorityNoFlood = "noflood"  // interactive calls alone
	PriorityFIFO    = "fifo"     // the batch on top, every call Interactive: one queue, first in, first out
	PriorityClasses = "priority" // the batch's calls marked Batch
)

// priorityWindow is the stretch of the run each point of the chart sums
// up.
const priorityWindow = 30 * time.Second

// MaxPriorityPassOver is the largest MaxPassOver RunPriority takes.
const MaxPriorityPassOver = 1 << 20

// PriorityStrategies returns the strategies in report order.
func PriorityStrategies() []string { return []string{PriorityNoFlood, PriorityFIFO, PriorityClasses} }

// PriorityCapacity is the provider's capacity, calls a second: Slots over
// the mean service time.
func PriorityCapacity() float64 {
	mean := PriorityServiceMedian.Seconds() * math.Exp(PriorityServiceSigma*PriorityServiceSigma/2)
	return PrioritySlots / mean
}

// PriorityConfig narrows the priority scenario. Its zero value runs every
// strategy, the priority one with ratelimit.DefaultMaxPassOver.
type PriorityConfig struct {
	// Strategies to run, in this order. Empty means PriorityStrategies().
	Strategies []string
	// MaxPassOver lists the AdaptiveConfig.MaxPassOver values the
	// priority strategy runs with, each a result. Empty means the
	// default's alone.
	MaxPassOver []int
	// Progress, if set, is told of each result once done.
	Progress func(PriorityResult)
}

// Validate reports the first thing wrong with c, in one line.
func (c PriorityConfig) Validate() error {
	for _, s := range c.Strategies {
		if !slices.Contains(PriorityStrategies(), s) {
			return fmt.Errorf("sim: unknown priority strategy %q (want one of %v)", s, PriorityStrategies())
		}
	}
	for _, m := range c.MaxPassOver {
		if m < 1 || m > MaxPriorityPassOver {
			return fmt.Errorf("sim: a MaxPassOver from 1 to %d (got %d)", MaxPriorityPassOver, m)
		}
	}
	return nil
}

// PriorityResult is one strategy's run.
type PriorityResult struct {
	Strategy string `json:"strategy"`
	// MaxPassOver is the Adaptive limit's, in the priority strategy;
	// zero in the others, where no call is Batch.
	MaxPassOver int `json:"max_pass_over"`
	// InteractiveCalls is the interactive calls that arrived after the
	// warm-up and were answered; their latency, from arrival to answer
	// (the wait for a slot included), has percentiles P50 and P99.
	InteractiveCalls int     `json:"interactive_calls"`
	InteractiveP50MS float64 `json:"interactive_p50_ms"`
	InteractiveP99MS float64 `json:"interactive_p99_ms"`
	// BatchCompleted is the batch's calls answered; BatchDone says all
	// of them were, and BatchS how long the batch took (to the end of the
	// run if not done). Zero with no batch.
	BatchCompleted int     `json:"batch_completed"`
	BatchDone      bool    `json:"batch_done"`
	BatchS         float64 `json:"batch_s"`
	// InteractiveP99ByWindow is the p99 latency of the interactive
	// calls answered in each 30 s of the run, in ms, for charts.
	InteractiveP99ByWindow []float64 `json:"interactive_p99_by_window_ms"`
}

// PriorityReport is the result of RunPriority.
type PriorityReport struct {
	Scenario string           `json:"scenario"`
	Seed     uint64           `json:"seed"`
	Results  []PriorityResult `json:"results"`
}

// RunPriority runs every strategy. Each strategy's run draws the same
// interactive arrivals and service times from seed, so the strategies
// differ only in what they do with them. It stops with ctx's cause soon
// after ctx is done.
func RunPriority(ctx context.Context, seed uint64, c PriorityConfig) (PriorityReport, error) {
	if err := c.Validate(); err != nil {
		return PriorityReport{}, err
	}
	strategies, passOvers := c.Strategies, c.MaxPassOver
	if len(strategies) == 0 {
		strategies = PriorityStrategies()
	}
	if len(passOvers) == 0 {
		passOvers = []int{ratelimit.DefaultMaxPassOver}
	}
	report := PriorityReport{Scenario: "priority", Seed: seed}
	for _, s := range strategies {
		ms := []int{0}
		if s == PriorityClasses {
			ms = passOvers
		}
		for _, m := range ms {
			r, err := newPrioritySim(s, m, seed).run(ctx)
			if err != nil {
				return PriorityReport{}, err
			}
			report.Results = append(report.Results, r)
			if c.Progress != nil {
				c.Progress(r)
			}
		}
	}
	return report, nil
}

// prioritySim is one strategy's run.
type prioritySim struct {
	strategy    string
	maxPassOver int
	// arrivals and service draw the interactive calls' arrivals and
	// every call's service time, each from a stream of its own.
	arrivals, service *rand.Rand

	scheduler
	start, end time.Time
	gate       *gate[*pcall]
	busy       int // calls the provider is serving

	interactive []time.Duration // latencies of interactive calls after the warm-up
	byWindow    [][]time.Duration
	batchLeft   int // batch calls not yet started
	batchDone   int
	batchEnd    time.Time
}

// pcall is one call.
type pcall struct {
	arrival time.Time
	batch   bool
}

func newPrioritySim(strategy string, maxPassOver int, seed uint64) *prioritySim {
	p := &prioritySim{strategy: strategy, maxPassOver: maxPassOver,
		arrivals: rand.New(rand.NewPCG(seed, 1)), service: rand.New(rand.NewPCG(seed, 2))}
	p.start = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	p.end = p.start.Add(PriorityDuration)
	p.clock = NewClock(p.start)
	cfg := ratelimit.AdaptiveConfig{Initial: PrioritySlots, Max: PrioritySlots, Clock: p.clock, MaxPassOver: maxPassOver}
	p.gate = newGate[*pcall](ratelimit.NewAdaptive(cfg), maxPassOver)
	p.byWindow = make([][]time.Duration, PriorityDuration/priorityWindow)
	return p
}

func (p *prioritySim) run(ctx context.Context) (PriorityResult, error) {
	p.at(p.start.Add(p.interarrival()), p.arrive)
	if p.strategy != PriorityNoFlood {
		p.batchLeft = PriorityBatchRequests
		p.at(p.start.Add(PriorityWarmup), func() {
			for range PriorityBatchConcurrency {
				p.nextBatch()
			}
		})
	}
	if err := p.runUntil(ctx, p.start, p.end, nil); err != nil {
		return PriorityResult{}, err
	}
	return p.result(), nil
}

func (p *prioritySim) interarrival() time.Duration {
	return time.Duration(p.arrivals.ExpFloat64() / (PriorityInteractiveShare * PriorityCapacity()) * float64(time.Second))
}

// arrive starts an interactive call and schedules the next.
func (p *prioritySim) arrive() {
	p.enter(&pcall{arrival: p.clock.Now()})
	p.at(p.clock.Now().Add(p.interarrival()), p.arrive)
}

// nextBatch starts the batch's next call, if any is left: a sender of
// the batch runner is free.
func (p *prioritySim) nextBatch() {
	if p.batchLeft == 0 {
		return
	}
	p.batchLeft--
	p.enter(&pcall{arrival: p.clock.Now(), batch: true})
}

// enter sends c if a slot is free, else queues it as its strategy marks
// it.
func (p *prioritySim) enter(c *pcall) {
	class := ratelimit.Interactive
	if c.batch && p.strategy == PriorityClasses {
		class = ratelimit.Batch
	}
	if p.gate.enter(class, c) {
		p.send(c)
	}
}

// send has the provider serve c, which holds a slot.
func (p *prioritySim) send(c *pcall) {
	p.busy++
	if p.busy > PrioritySlots {
		panic("sim: the Adaptive limit let more calls through than the provider serves")
	}
	service := time.Duration(float64(PriorityServiceMedian) * math.Exp(PriorityServiceSigma*p.service.NormFloat64()))
	p.at(p.clock.Now().Add(service), func() {
		p.busy--
		p.answered(c)
		p.gate.release(ratelimit.Success, 0, nil, nil, p.send)
	})
}

// answered counts c's answer.
func (p *prioritySim) answered(c *pcall) {
	now := p.clock.Now()
	if c.batch {
		p.batchDone++
		if p.batchDone == PriorityBatchRequests {
			p.batchEnd = now
		}
		p.nextBatch()
		return
	}
	if c.arrival.Before(p.start.Add(PriorityWarmup)) {
		return
	}
	latency := now.Sub(c.arrival)
	p.interactive = append(p.interactive, latency)
	if w := int(now.Sub(p.start) / priorityWindow); w < len(p.byWindow) {
		p.byWindow[w] = append(p.byWindow[w], latency)
	}
}

func (p *prioritySim) result() PriorityResult {
	r := PriorityResult{
		Strategy: p.strategy, MaxPassOver: p.maxPassOver, InteractiveCalls: len(p.interactive),
		InteractiveP50MS: percentileMS(p.interactive, 0.50), InteractiveP99MS: percentileMS(p.interactive, 0.99),
		BatchCompleted: p.batchDone, BatchDone: p.strategy != PriorityNoFlood && p.batchDone == PriorityBatchRequests,
	}
	switch {
	case r.BatchDone:
		r.BatchS = p.batchEnd.Sub(p.start.Add(PriorityWarmup)).Seconds()
	case p.strategy != PriorityNoFlood:
		r.BatchS = (PriorityDuration - PriorityWarmup).Seconds()
	}
	r.BatchS = math.Round(r.BatchS*10) / 10
	for _, w := range p.byWindow {
		r.InteractiveP99ByWindow = append(r.InteractiveP99ByWindow, percentileMS(w, 0.99))
	}
	return r
}

// percentileMS returns the q-quantile of ds (nearest rank) in whole
// milliseconds; zero if ds is empty.
func percentileMS(ds []time.Duration, q float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	i := max(int(math.Ceil(q*float64(len(sorted))))-1, 0)
	return float64(sorted[i].Milliseconds())
}

// Charts draws the interactive calls' p99 latency over the run, a line
// per result.
func (r PriorityReport) Charts() []Chart {
	c := Chart{
		Title:  "Interactive p99 latency, each 30 s",
		XLabel: "seconds from the batch's start", YLabel: "p99 latency, ms",
		Caption: fmt.Sprintf("Interactive calls at %.0f%% of the provider's capacity; a batch of %d requests, %d at a time, from 0 s.",
			100*PriorityInteractiveShare, PriorityBatchRequests, PriorityBatchConcurrency),
	}
	for _, x := range r.Results {
		s := Series{Name: x.Name()}
		for w, ms := range x.InteractiveP99ByWindow {
			s.Points = append(s.Points, Point{X: (time.Duration(w+1)*priorityWindow - PriorityWarmup).Seconds(), Y: ms})
		}
		c.Series = append(c.Series, s)
	}
	return []Chart{c}
}

// Name names a result in tables and charts: its strategy, and its
// MaxPassOver if any.
func (x PriorityResult) Name() string {
	if x.MaxPassOver == 0 {
		return x.Strategy
	}
	return fmt.Sprintf("%s (max pass-over %d)", x.Strategy, x.MaxPassOver)
}
