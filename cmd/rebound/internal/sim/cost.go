package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
)

// CostWorkload is the month of agent traffic of the $340 article's cost study (see the README's Background).
// Its zero value is the default workload; each field documents its own.
// A rate or IncidentsPerDay below zero means none: zero means the default.
type CostWorkload struct {
	// Days of traffic, at most MaxCostDays. Zero means 30.
	Days int
	// TasksPerDay, spread uniformly over each day, at most
	// MaxCostTasksPerDay. Zero means 2000.
	TasksPerDay int
	// MinCalls and MaxCalls bound the LLM calls of one task, made one
	// after another; a task succeeds only if all of them do. Each is at
	// most MaxCostCalls. Zero means 3 and 5.
	MinCalls, MaxCalls int
	// InputTokens and OutputTokens of one call, each at most
	// MaxCostTokens. Zero means 2000 and 500. A failed attempt is billed
	// its input tokens.
	InputTokens, OutputTokens int
	// Primary and Fallback are the two models' prices. Zero means $2.50 /
	// $10 and $0.15 / $0.60 per million input / output tokens.
	Primary, Fallback cost.Price
	// PermanentRate is the share of calls whose request can never succeed
	// as it is (400, 413, 422, 401), at most 1. Zero means 0.02.
	PermanentRate float64
	// RateLimitRate and ServerErrorRate are the chances that an attempt
	// meets a 429 (with a retry hint of 1–3 s) or a 5xx; together at most
	// 1. Zero means 0.015 each.
	RateLimitRate, ServerErrorRate float64
	// IncidentsPerDay is the mean number of provider incidents a day, each
	// lasting 5 to 15 minutes, during which the primary model answers 529
	// to 90% of attempts. Zero means 1.5.
	IncidentsPerDay float64
}

// The largest workload RunCost takes. Its memory does not grow with the
// days (one day of tasks is held at a time) but does with the tasks of a
// day; and a century of days keeps every virtual time far from wrapping.
const (
	MaxCostDays        = 36500
	MaxCostTasksPerDay = 100000
	MaxCostCalls       = 1000
	MaxCostTokens      = 10000000
)

func (w CostWorkload) withDefaults() CostWorkload {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	deff := func(v *float64, d float64) {
		switch {
		case *v == 0:
			*v = d
		case *v < 0:
			*v = 0 // none
		}
	}
	def(&w.Days, 30)
	def(&w.TasksPerDay, 2000)
	def(&w.MinCalls, 3)
	def(&w.MaxCalls, 5)
	def(&w.InputTokens, 2000)
	def(&w.OutputTokens, 500)
	if w.Primary == (cost.Price{}) {
		w.Primary = cost.Price{InputPerMillion: 2.5, OutputPerMillion: 10}
	}
	if w.Fallback == (cost.Price{}) {
		w.Fallback = cost.Price{InputPerMillion: 0.15, OutputPerMillion: 0.6}
	}
	deff(&w.PermanentRate, 0.02)
	deff(&w.RateLimitRate, 0.015)
	deff(&w.ServerErrorRate, 0.015)
	deff(&w.IncidentsPerDay, 1.5)
	w.MaxCalls = max(w.MaxCalls, w.MinCalls)
	return w
}

// Validate reports the first thing wrong with w, in one line.
func (w CostWorkload) Validate() error {
	count := func(name string, v, most int) error {
		if v < 0 || v > most {
			return fmt.Errorf("sim: %s must be from 0 to %d (got %d)", name, most, v)
		}
		return nil
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	rate := func(name string, v float64) error {
		if !finite(v) || v > 1 {
			return fmt.Errorf("sim: %s must be a probability at most 1, or below 0 for none (got %v)", name, v)
		}
		return nil
	}
	price := func(name string, p cost.Price) error {
		if !finite(p.InputPerMillion) || !finite(p.OutputPerMillion) || p.InputPerMillion < 0 || p.OutputPerMillion < 0 {
			return fmt.Errorf("sim: %s prices must be finite and not negative (got %v and %v)", name, p.InputPerMillion, p.OutputPerMillion)
		}
		return nil
	}
	for _, err := range []error{
		count("days", w.Days, MaxCostDays),
		count("tasks per day", w.TasksPerDay, MaxCostTasksPerDay),
		count("min calls", w.MinCalls, MaxCostCalls),
		count("max calls", w.MaxCalls, MaxCostCalls),
		count("input tokens", w.InputTokens, MaxCostTokens),
		count("output tokens", w.OutputTokens, MaxCostTokens),
		price("primary", w.Primary),
		price("fallback", w.Fallback),
		rate("permanent rate", w.PermanentRate),
		rate("rate-limit rate", w.RateLimitRate),
		rate("server-error rate", w.ServerErrorRate),
	} {
		if err != nil {
			return err
		}
	}
	if d := w.withDefaults(); d.RateLimitRate+d.ServerErrorRate > 1 {
		return fmt.Errorf("sim: rate-limit and server-error rates must add up to at most 1 (got %v and %v)", d.RateLimitRate, d.ServerErrorRate)
	}
	if !finite(w.IncidentsPerDay) {
		return fmt.Errorf("sim: incidents per day must be a finite number, or below 0 for none (got %v)", w.IncidentsPerDay)
	}
	return nil
}

// Strategy names, as in the report.
const (
	StrategyNaive      = "naive"
	StrategyBackoff    = "backoff"
	StrategyClassified = "classified"
	StrategyRebound    = "rebound"
)

// CostStrategies returns the strategies of the cost scenario, in the order
// RunCost runs and reports them.
func CostStrategies() []string {
	return []string{StrategyNaive, StrategyBackoff, StrategyClassified, StrategyRebound}
}

// StrategyResult is one strategy's month.
type StrategyResult struct {
	Name string `json:"name"`
	// Requests is every attempt sent to a model.
	Requests int `json:"requests"`
	// FallbackRequests is the part of Requests sent to the fallback model.
	FallbackRequests  int     `json:"fallback_requests"`
	Tasks             int     `json:"tasks"`
	Succeeded         int     `json:"succeeded"`
	MonthlyCostUSD    float64 `json:"monthly_cost_usd"`
	WastedShare       float64 `json:"wasted_share"`
	SuccessRate       float64 `json:"success_rate"`
	CostPerSuccessUSD float64 `json:"cost_per_success_usd"`
}

// CostReport is the result of RunCost.
type CostReport struct {
	Seed uint64 `json:"seed"`
	// FirstAttemptFailureRate is the share of calls whose first attempt
	// on the primary model failed, as the article's traffic turned out.
	FirstAttemptFailureRate float64          `json:"first_attempt_failure_rate"`
	Strategies              []StrategyResult `json:"strategies"`
}

// CostProgress is where a RunCost is: it is told after each simulated
// day of each strategy.
type CostProgress struct {
	// Strategy is the strategy running, one of the Strategy names.
	Strategy string
	// Day is the days of it simulated so far, out of Days.
	Day, Days int
	// Result is the strategy's month once its last day is done; nil
	// before.
	Result *StrategyResult
}

// RunCost runs the $340 article's strategies, and rebound's recommended setup,
// over the same simulated month, each through rebound's real code in
// virtual time. It tells progress, if set, after each simulated day.
//
// The month is streamed: each strategy draws it again, a day at a time,
// and only running totals are kept, so memory does not grow with the days.
// RunCost stops with ctx's cause as soon as ctx is done, before the next
// task.
func RunCost(ctx context.Context, seed uint64, w CostWorkload, progress func(CostProgress)) (CostReport, error) {
	if err := w.Validate(); err != nil {
		return CostReport{}, err
	}
	w = w.withDefaults()
	m := &month{w: w, seed: seed, start: time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)}
	// The incidents are drawn after the whole month of tasks, from the
	// same generator: a first pass finds where it stands then.
	after, err := m.each(ctx, nil, nil)
	if err != nil {
		return CostReport{}, err
	}
	report := CostReport{Seed: seed}
	prices := cost.Table{primaryName: w.Primary, fallbackName: w.Fallback}
	for _, name := range CostStrategies() {
		clock := NewClock(m.start)
		p := &provider{seed: seed, w: w, clock: clock, incidents: newIncidents(after, w, m.start)}
		chain := strategy(name, p, clock, rand.New(rand.NewPCG(seed, 99)))
		simCtx := rebound.WithClock(context.Background(), clock)
		ledger := cost.Ledger{Prices: prices}
		res := StrategyResult{Name: name}
		var spentOn cost.Task
		task := func(at time.Time, calls []call) {
			clock.AdvanceTo(at)
			spentOn = cost.Task{Attempts: spentOn.Attempts[:0], Succeeded: true}
			for i := range calls {
				r, err := chain.Do(simCtx, request{call: &calls[i]})
				spentOn.Attempts = append(spentOn.Attempts, r.Task().Attempts...)
				if err != nil {
					spentOn.Succeeded = false
					break // the agent gives the task up
				}
			}
			for _, a := range spentOn.Attempts {
				if a.Target == fallbackName {
					res.FallbackRequests++
				}
			}
			ledger.Add(spentOn)
		}
		var dayDone func(int)
		if progress != nil {
			dayDone = func(day int) {
				if day < w.Days {
					progress(CostProgress{Strategy: name, Day: day, Days: w.Days})
				}
			}
		}
		if _, err := m.each(ctx, task, dayDone); err != nil {
			return CostReport{}, err
		}
		s := ledger.Summary()
		res.Requests, res.Tasks, res.Succeeded = s.Attempts, s.Tasks, s.Succeeded
		res.MonthlyCostUSD = s.Spent * 30 / float64(w.Days)
		res.WastedShare, res.SuccessRate, res.CostPerSuccessUSD = s.WastedShare(), s.SuccessRate(), s.CostPerSuccess()
		report.Strategies = append(report.Strategies, res)
		if progress != nil {
			progress(CostProgress{Strategy: name, Day: w.Days, Days: w.Days, Result: &res})
		}
	}
	report.FirstAttemptFailureRate, err = firstAttemptFailureRate(ctx, m, after)
	if err != nil {
		return CostReport{}, err
	}
	return report, nil
}

// strategy builds one strategy's chain over p's two models.
func strategy(name string, p *provider, clock *Clock, rng *rand.Rand) *fallback.Chain[request, string] {
	primary, cheap := p.target(primaryName, 0), p.target(fallbackName, 1)
	switch name {
	case StrategyNaive:
		// Any error, three attempts, sleeping 1 s then 2 s.
		primary.Policy = rebound.Policy{MaxAttempts: 3, BaseDelay: time.Second, Shape: rebound.ShapeLinear,
			Jitter: rebound.JitterNone, ServerWait: rebound.ServerWaitIgnore,
			Classifier: func(error) rebound.Verdict { return rebound.Verdict{Kind: rebound.KindTransient} }}
		primary.RetryOverloaded = true
		return &fallback.Chain[request, string]{Targets: []fallback.Target[request, string]{primary}}
	case StrategyBackoff:
		// 429 and 5xx, up to 5 retries, exponential from 500 ms with
		// jitter; no server hints; other errors at once.
		primary.Policy = rebound.Policy{MaxAttempts: 6, BaseDelay: 500 * time.Millisecond, Jitter: rebound.JitterEqual,
			ServerWait: rebound.ServerWaitIgnore, Rand: rng, Classifier: statusOnly}
		primary.RetryOverloaded = true
		return &fallback.Chain[request, string]{Targets: []fallback.Target[request, string]{primary}}
	case StrategyClassified:
		// The article's third version: 4xx never retried, server hints
		// honoured, a breaker per model (5 failures in a row, 60 s), the
		// cheaper model when the breaker is open or retries are spent.
		b := breaker.Config{ConsecutiveFailures: 5, FailureRate: -1, Cooldown: time.Minute, Clock: clock}
		for i, t := range []*fallback.Target[request, string]{&primary, &cheap} {
			t.Policy = rebound.Policy{MaxAttempts: 4, BaseDelay: time.Second, Jitter: rebound.JitterNone, Rand: rng,
				Classifier: statusOnly, Breaker: breaker.New(fmt.Sprint(i), b)}
			t.RetryOverloaded = true
		}
		return &fallback.Chain[request, string]{Targets: []fallback.Target[request, string]{primary, cheap}}
	}
	// rebound: the recommended setup, with a compaction hook for 413s.
	primary.Policy.Rand, cheap.Policy.Rand = rng, rng
	chain := fallback.Recommended(breaker.Config{Clock: clock}, primary, cheap)
	chain.Compact = func(_ context.Context, r request, _ error) (request, error) {
		r.compacted = true
		return r, nil
	}
	return chain
}

// statusOnly is the classification of the $340 article's second and third
// versions: 429 and 5xx retried (with any Retry-After), everything else
// not.
func statusOnly(err error) rebound.Verdict {
	v := rebound.Classify(err)
	if herr, ok := err.(*rebound.HTTPError); ok {
		v = rebound.ClassifyResponse(herr.StatusCode, herr.Header, nil)
		if herr.StatusCode == 529 {
			v.Kind = rebound.KindTransient
		}
	}
	return v
}

// firstAttemptFailureRate replays every call's first attempt on the
// primary model at its task's start, to say what the traffic was like.
func firstAttemptFailureRate(ctx context.Context, m *month, after rand.PCG) (float64, error) {
	clock := NewClock(m.start)
	p := &provider{seed: m.seed, w: m.w, clock: clock, incidents: newIncidents(after, m.w, m.start)}
	calls, failed := 0, 0
	_, err := m.each(ctx, func(at time.Time, cs []call) {
		clock.AdvanceTo(at)
		for i := range cs {
			calls++
			if _, err := p.attempt(context.Background(), request{call: &cs[i]}, 0); err != nil {
				failed++
			}
		}
	}, nil)
	if err != nil || calls == 0 {
		return 0, err
	}
	return float64(failed) / float64(calls), nil
}
