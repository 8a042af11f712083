package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/fallback"
)

// CostWorkload is the month of agent traffic of seed 002's cost study.
// Its zero value is the default workload; each field documents its own.
type CostWorkload struct {
	// Days of traffic. Zero means 30.
	Days int
	// TasksPerDay, spread uniformly over each day. Zero means 2000.
	TasksPerDay int
	// MinCalls and MaxCalls bound the LLM calls of one task, made one
	// after another; a task succeeds only if all of them do. Zero means 3
	// and 5.
	MinCalls, MaxCalls int
	// InputTokens and OutputTokens of one call. Zero means 2000 and 500.
	// A failed attempt is billed its input tokens.
	InputTokens, OutputTokens int
	// Primary and Fallback are the two models' prices. Zero means $2.50 /
	// $10 and $0.15 / $0.60 per million input / output tokens.
	Primary, Fallback cost.Price
	// PermanentRate is the share of calls whose request can never succeed
	// as it is (400, 413, 422, 401). Zero means 0.02.
	PermanentRate float64
	// RateLimitRate and ServerErrorRate are the chances that an attempt
	// meets a 429 (with a retry hint of 1–3 s) or a 5xx. Zero means 0.015
	// each.
	RateLimitRate, ServerErrorRate float64
	// IncidentsPerDay is the mean number of provider incidents a day, each
	// lasting 5 to 15 minutes, during which the primary model answers 529
	// to 90% of attempts. Zero means 1.5.
	IncidentsPerDay float64
}

func (w CostWorkload) withDefaults() CostWorkload {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	deff := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
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
	switch {
	case w.Days < 0 || w.TasksPerDay < 0 || w.MinCalls < 0 || w.MaxCalls < 0:
		return fmt.Errorf("sim: days, tasks per day and calls per task must not be negative")
	case w.InputTokens < 0 || w.OutputTokens < 0:
		return fmt.Errorf("sim: token counts must not be negative")
	case w.PermanentRate < 0 || w.PermanentRate > 1 || w.RateLimitRate < 0 || w.ServerErrorRate < 0 ||
		w.RateLimitRate+w.ServerErrorRate > 1:
		return fmt.Errorf("sim: failure rates must lie in [0, 1]")
	case w.IncidentsPerDay < 0:
		return fmt.Errorf("sim: incidents per day must not be negative")
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
	// on the primary model failed, as this seed's traffic turned out.
	FirstAttemptFailureRate float64          `json:"first_attempt_failure_rate"`
	Strategies              []StrategyResult `json:"strategies"`
}

// call is one LLM call of the workload, its fate drawn up front so that
// every strategy meets the same traffic.
type call struct {
	id uint64
	// permanent is the status a request fails with whatever is retried
	// (0 if none); a 413 succeeds once compacted.
	permanent int
	// input is the call's prompt in tokens.
	input int64
}

// request is what a strategy sends for a call.
type request struct {
	*call
	compacted bool
}

type task struct {
	at    time.Time
	calls []*call
}

type incident struct{ from, to time.Time }

// provider models the two models. Whether attempt k of call c on a model
// fails is a pure function of (seed, c, k, model) and of the time, so each
// strategy meets the same odds.
type provider struct {
	seed      uint64
	w         CostWorkload
	clock     *Clock
	incidents []incident
	// limitedUntil is, per call and model, when a 429 says to come back;
	// an attempt sooner meets another 429.
	limitedUntil map[[2]uint64]time.Time
	attempts     map[[2]uint64]uint64
}

const (
	primaryName  = "primary"
	fallbackName = "fallback"
	attemptTime  = time.Second // virtual time one attempt takes
	// contextWindow is both models' context window. The workload gives a
	// request that overflows it as many tokens as any other (as seed 002
	// counted them); compaction takes 40% off.
	contextWindow = 128000
)

func (p *provider) target(name string, model uint64) fallback.Target[request, string] {
	return fallback.Target[request, string]{
		Name:          name,
		ContextWindow: contextWindow,
		Call: func(ctx context.Context, r request) (string, error) {
			return p.attempt(ctx, r, model)
		},
	}
}

func (p *provider) attempt(ctx context.Context, r request, model uint64) (string, error) {
	now := p.clock.Now()
	p.clock.Advance(attemptTime)
	key := [2]uint64{r.id, model}
	k := p.attempts[key]
	p.attempts[key] = k + 1
	input := r.input
	if r.compacted {
		input = input * 6 / 10
	}
	rebound.ReportUsage(ctx, rebound.Usage{InputTokens: input}) // billed, whatever happens

	if r.permanent != 0 && !(r.permanent == http.StatusRequestEntityTooLarge && r.compacted) {
		return "", permanentError(r.permanent)
	}
	if until, ok := p.limitedUntil[key]; ok && now.Before(until) {
		return "", rateLimited(until.Sub(now))
	}
	rng := rand.New(rand.NewPCG(p.seed^r.id, k<<8|model))
	u := rng.Float64()
	switch {
	case model == 0 && p.inIncident(now) && u < 0.9:
		return "", overloadedError
	case u < p.w.RateLimitRate:
		hint := time.Duration(1+rng.IntN(3)) * time.Second
		p.limitedUntil[key] = now.Add(hint)
		return "", rateLimited(hint)
	case u < p.w.RateLimitRate+p.w.ServerErrorRate:
		return "", &rebound.HTTPError{StatusCode: []int{500, 502, 503}[rng.IntN(3)]}
	}
	rebound.ReportUsage(ctx, rebound.Usage{OutputTokens: int64(p.w.OutputTokens)})
	return "ok", nil
}

func (p *provider) inIncident(t time.Time) bool {
	i, _ := slices.BinarySearchFunc(p.incidents, t, func(in incident, t time.Time) int { return in.to.Compare(t) })
	return i < len(p.incidents) && !t.Before(p.incidents[i].from)
}

var overloadedError = &rebound.HTTPError{StatusCode: 529,
	Body: []byte(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)}

func rateLimited(wait time.Duration) error {
	secs := max(int((wait+time.Second-1)/time.Second), 1)
	return &rebound.HTTPError{StatusCode: 429, Header: http.Header{"Retry-After": {fmt.Sprint(secs)}},
		Body: []byte(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`)}
}

func permanentError(status int) error {
	body := map[int]string{
		400: `{"error":{"message":"Invalid schema for function 'search'","type":"invalid_request_error","code":"invalid_value"}}`,
		413: `{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}`,
		422: `{"error":{"message":"Unprocessable entity","type":"invalid_request_error"}}`,
		401: `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`,
	}[status]
	return &rebound.HTTPError{StatusCode: status, Body: []byte(body)}
}

// RunCost runs seed 002's strategies, and rebound's recommended setup,
// over the same simulated month, each through rebound's real code in
// virtual time.
func RunCost(seed uint64, w CostWorkload) (CostReport, error) {
	if err := w.Validate(); err != nil {
		return CostReport{}, err
	}
	w = w.withDefaults()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	tasks, incidents := workload(seed, w, start)
	report := CostReport{Seed: seed}
	prices := cost.Table{primaryName: w.Primary, fallbackName: w.Fallback}
	for _, name := range []string{StrategyNaive, StrategyBackoff, StrategyClassified, StrategyRebound} {
		clock := NewClock(start)
		p := &provider{seed: seed, w: w, clock: clock, incidents: incidents,
			limitedUntil: map[[2]uint64]time.Time{}, attempts: map[[2]uint64]uint64{}}
		chain := strategy(name, p, clock, rand.New(rand.NewPCG(seed, 99)))
		ctx := rebound.WithClock(context.Background(), clock)
		ledger := cost.Ledger{Prices: prices}
		res := StrategyResult{Name: name}
		for _, t := range tasks {
			clock.AdvanceTo(t.at)
			var spentOn cost.Task
			spentOn.Succeeded = true
			for _, c := range t.calls {
				r, err := chain.Do(ctx, request{call: c})
				ct := r.Task()
				spentOn.Attempts = append(spentOn.Attempts, ct.Attempts...)
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
		s := ledger.Summary()
		res.Requests, res.Tasks, res.Succeeded = s.Attempts, s.Tasks, s.Succeeded
		res.MonthlyCostUSD = s.Spent * 30 / float64(w.Days)
		res.WastedShare, res.SuccessRate, res.CostPerSuccessUSD = s.WastedShare(), s.SuccessRate(), s.CostPerSuccess()
		report.Strategies = append(report.Strategies, res)
	}
	report.FirstAttemptFailureRate = firstAttemptFailureRate(seed, w, tasks, incidents, start)
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
		// The seed's third version: 4xx never retried, server hints
		// honoured, a breaker per model (5 failures in a row, 60 s), the
		// cheaper model when the breaker is open or retries are spent.
		b := breaker.Config{ConsecutiveFailures: 5, FailureRate: -1, Cooldown: time.Minute, Now: clock.Now}
		for i, t := range []*fallback.Target[request, string]{&primary, &cheap} {
			t.Policy = rebound.Policy{MaxAttempts: 4, BaseDelay: time.Second, Jitter: rebound.JitterNone, Rand: rng,
				Classifier: statusOnly, Breaker: breaker.New(fmt.Sprint(i), b)}
			t.RetryOverloaded = true
		}
		return &fallback.Chain[request, string]{Targets: []fallback.Target[request, string]{primary, cheap}}
	}
	// rebound: the recommended setup, with a compaction hook for 413s.
	primary.Policy.Rand, cheap.Policy.Rand = rng, rng
	chain := fallback.Recommended(breaker.Config{Now: clock.Now}, primary, cheap)
	chain.Compact = func(_ context.Context, r request, _ error) (request, error) {
		r.compacted = true
		return r, nil
	}
	return chain
}

// statusOnly is the classification of seed 002's second and third
// versions: 429 and 5xx retried (with any Retry-After), everything else
// not.
func statusOnly(err error) rebound.Verdict {
	v := rebound.Classify(err)
	if herr, ok := err.(*rebound.HTTPError); ok {
		v = rebound.ClassifyHTTP(herr.StatusCode, herr.Header)
		if herr.StatusCode == 529 {
			v.Kind = rebound.KindTransient
		}
	}
	return v
}

// workload draws the month: tasks and their calls, and the incidents.
func workload(seed uint64, w CostWorkload, start time.Time) ([]task, []incident) {
	rng := rand.New(rand.NewPCG(seed, 1))
	day := 24 * time.Hour
	var tasks []task
	var id uint64
	for d := range w.Days {
		dayStart := start.Add(time.Duration(d) * day)
		var today []task
		for range w.TasksPerDay {
			t := task{at: dayStart.Add(time.Duration(rng.Int64N(int64(day))))}
			for range w.MinCalls + rng.IntN(w.MaxCalls-w.MinCalls+1) {
				c := &call{id: id, input: int64(w.InputTokens)}
				id++
				if rng.Float64() < w.PermanentRate {
					c.permanent = []int{400, 400, 400, 400, 413, 413, 413, 422, 401, 401}[rng.IntN(10)]
				}
				t.calls = append(t.calls, c)
			}
			today = append(today, t)
		}
		slices.SortFunc(today, func(a, b task) int { return a.at.Compare(b.at) })
		tasks = append(tasks, today...)
	}
	var incidents []incident
	horizon := time.Duration(w.Days) * day
	if w.IncidentsPerDay > 0 {
		mean := float64(day) / w.IncidentsPerDay
		for at := time.Duration(rng.ExpFloat64() * mean); at < horizon; at += time.Duration(rng.ExpFloat64() * mean) {
			from := start.Add(at)
			if n := len(incidents); n > 0 && from.Before(incidents[n-1].to) {
				from = incidents[n-1].to // incidents do not overlap
			}
			in := incident{from: from, to: from.Add(5*time.Minute + time.Duration(rng.Int64N(int64(10*time.Minute))))}
			incidents = append(incidents, in)
			at = in.to.Sub(start)
		}
	}
	return tasks, incidents
}

// firstAttemptFailureRate replays every call's first attempt on the
// primary model at its task's start, to say what the traffic was like.
func firstAttemptFailureRate(seed uint64, w CostWorkload, tasks []task, incidents []incident, start time.Time) float64 {
	clock := NewClock(start)
	p := &provider{seed: seed, w: w, clock: clock, incidents: incidents,
		limitedUntil: map[[2]uint64]time.Time{}, attempts: map[[2]uint64]uint64{}}
	calls, failed := 0, 0
	for _, t := range tasks {
		clock.AdvanceTo(t.at)
		for _, c := range t.calls {
			calls++
			if _, err := p.attempt(context.Background(), request{call: c}, 0); err != nil {
				failed++
			}
		}
	}
	if calls == 0 {
		return 0
	}
	return float64(failed) / float64(calls)
}
