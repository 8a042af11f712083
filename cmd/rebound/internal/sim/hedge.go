package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
)

// The hedge scenario's fixed model (the issue that asked for it pins it):
// an attempt's time to first token is lognormal around HedgeMedian with
// σ = HedgeSigma, and for HedgeSlowShare of attempts HedgeSlowFactor times
// that; every attempt, a hedge included, draws its own. Calls of
// HedgeInputTokens in and HedgeOutputTokens out arrive as a Poisson stream
// of HedgeArrivals a second; after its first token an attempt streams
// HedgeOutputRate tokens a second. An attempt cancelled because the other
// won is billed its input and the output it had produced by then.
const (
	HedgeMedian       = time.Second
	HedgeSigma        = 0.35
	HedgeSlowShare    = 0.05
	HedgeSlowFactor   = 10
	HedgeInputTokens  = 2000
	HedgeOutputTokens = 500
	HedgeArrivals     = 20.0
	HedgeOutputRate   = 50.0
)

// HedgePrice is what the calls cost: Claude Sonnet 4's list price, $3 per
// million input tokens and $15 per million output tokens.
var HedgePrice = cost.Price{InputPerMillion: 3, OutputPerMillion: 15}

// Hedge strategies: the same calls, with the same first attempts, made
// without and with a hedge.
const (
	HedgeNone = "none"  // the first attempt alone
	HedgeOn   = "hedge" // rebound's zero Hedge and a RetryBudget
)

// DefaultHedgeCalls is how many calls each strategy makes by default, the
// issue's figure: a p99 drawn from a thousand slow calls. MaxHedgeCalls
// is the most RunHedge takes (it keeps every call's time to first token).
const (
	DefaultHedgeCalls = 100000
	MaxHedgeCalls     = 10000000
)

// HedgeConfig sizes the hedge scenario. Its zero value is the run.
type HedgeConfig struct {
	// Calls each strategy makes, at most MaxHedgeCalls. Zero means
	// DefaultHedgeCalls; far fewer leave the p99 to a handful of calls.
	Calls int
	// Progress, if set, is told of each strategy's result once known.
	Progress func(HedgeResult)
}

// Validate reports the first thing wrong with c, in one line.
func (c HedgeConfig) Validate() error {
	if c.Calls < 0 || c.Calls > MaxHedgeCalls {
		return fmt.Errorf("sim: calls must be from 1 to %d (got %d)", MaxHedgeCalls, c.Calls)
	}
	return nil
}

// HedgeResult is one strategy's calls: their time to first token, what
// they cost beyond the same calls unhedged, and what theory says.
type HedgeResult struct {
	Strategy string  `json:"strategy"`
	P50MS    float64 `json:"p50_ms"`
	P99MS    float64 `json:"p99_ms"`
	MeanMS   float64 `json:"mean_ms"`
	// ExtraSpend is the strategy's spend beyond HedgeNone's, as a
	// fraction of HedgeNone's.
	ExtraSpend float64 `json:"extra_spend"`
	// Hedged is the share of calls that made a hedge, and Refused the
	// share whose hedge the retry budget refused.
	Hedged  float64 `json:"hedged"`
	Refused float64 `json:"refused"`
	// The theory's figures: for HedgeOn, with the delay at the 90th
	// percentile of one attempt's time to first token (see hedgeTheory).
	P50TheoryMS      float64 `json:"p50_theory_ms"`
	P99TheoryMS      float64 `json:"p99_theory_ms"`
	ExtraSpendTheory float64 `json:"extra_spend_theory"`

	// tail is the share of calls slower than x seconds, for Charts.
	tail []Point
}

// HedgeReport is the result of RunHedge.
type HedgeReport struct {
	Scenario string        `json:"scenario"` // "hedge"
	Seed     uint64        `json:"seed"`
	Calls    int           `json:"calls"`
	Results  []HedgeResult `json:"results"` // HedgeNone, then HedgeOn
}

// hedgeStream is the second PCG seed of the scenario. Both strategies use
// it, so their calls arrive at the same times with the same first
// attempts (common random numbers): the difference is the hedge's alone.
const hedgeStream = 0x6865646765 // "hedge"

// hedgeTarget is the target the simulated calls go to.
const hedgeTarget = "model"

// RunHedge makes the same calls without and with a hedge, in virtual
// time, and reports their times to first token and what the hedges cost.
// The hedges are rebound's own: a zero rebound.Hedge picks each call's
// delay, learning from the calls that came before it as Do and Transport
// do, and a zero rebound.RetryBudget on the simulation's clock pays for
// them. The race of the two attempts is modelled here, since Do times a
// hedge by the real clock in goroutines of its own, which no virtual
// clock drives: TestHedgeModelIsTheEnginesRace runs the same calls
// through Do's own race, in a synctest bubble, and wants the same times
// to first token, hedges and spend. The same seed gives the same report.
// It stops with ctx's cause soon after ctx is done.
func RunHedge(ctx context.Context, seed uint64, c HedgeConfig) (HedgeReport, error) {
	if err := c.Validate(); err != nil {
		return HedgeReport{}, err
	}
	calls := c.Calls
	if calls == 0 {
		calls = DefaultHedgeCalls
	}
	report := HedgeReport{Scenario: "hedge", Seed: seed, Calls: calls}
	var unhedged float64
	for _, s := range []string{HedgeNone, HedgeOn} {
		h := &hedgeRun{calls: calls, rng: rand.New(rand.NewPCG(seed, hedgeStream)), budget: &rebound.RetryBudget{}}
		if s == HedgeOn {
			h.hedge = &rebound.Hedge{}
		}
		if err := h.run(ctx); err != nil {
			return HedgeReport{}, err
		}
		if s == HedgeNone {
			unhedged = h.spend
		}
		r := h.result(s, unhedged)
		report.Results = append(report.Results, r)
		if c.Progress != nil {
			c.Progress(r)
		}
	}
	return report, nil
}

// hedgeRun is one strategy's calls: events in virtual time.
type hedgeRun struct {
	calls  int
	rng    *rand.Rand
	hedge  *rebound.Hedge // nil: no hedging
	budget *rebound.RetryBudget

	scheduler

	arrived         int
	firstTokens     []time.Duration // each call's time to first token
	spend           float64         // US dollars
	hedged, refused int
}

// hcall is one call: its first attempt and perhaps a hedge, each with the
// time to first token drawn for it.
type hcall struct {
	start      time.Time
	ttft       [2]time.Duration // of the first attempt and of the hedge
	hedgeStart time.Time        // zero: no hedge
	done       bool             // one attempt has produced its first token
}

// run makes the calls.
func (h *hedgeRun) run(ctx context.Context) error {
	h.clock = NewClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	h.firstTokens = make([]time.Duration, 0, h.calls)
	start := h.clock.Now()
	h.at(start.Add(h.interarrival()), h.arrive)
	return h.runUntil(ctx, start, start.Add(math.MaxInt64), nil) // until the last call is done
}

func (h *hedgeRun) interarrival() time.Duration {
	return time.Duration(h.rng.ExpFloat64() / HedgeArrivals * float64(time.Second))
}

// firstTokenTime draws one attempt's time to first token from the model.
func (h *hedgeRun) firstTokenTime() time.Duration {
	t := HedgeMedian.Seconds() * math.Exp(HedgeSigma*h.rng.NormFloat64())
	if h.rng.Float64() < HedgeSlowShare {
		t *= HedgeSlowFactor
	}
	return time.Duration(t * float64(time.Second))
}

// arrive starts a call as Do would: a deposit in the budget, its first
// attempt, and a hedge after the Hedge's delay. The draws come in the
// same order whatever the strategy, so both make the same calls.
func (h *hedgeRun) arrive() {
	now := h.clock.Now()
	h.arrived++
	c := &hcall{start: now, ttft: [2]time.Duration{h.firstTokenTime(), h.firstTokenTime()}}
	h.budget.Deposit(now)
	h.at(now.Add(c.ttft[0]), func() { h.firstToken(c, 0) })
	if h.hedge != nil {
		if delay := h.hedge.Delay(hedgeTarget); delay > 0 {
			h.at(now.Add(delay), func() { h.startHedge(c) })
		}
	}
	if h.arrived < h.calls {
		h.at(now.Add(h.interarrival()), h.arrive)
	}
}

// startHedge starts c's hedge if its first attempt has produced nothing
// yet and the budget allows one more attempt.
func (h *hedgeRun) startHedge(c *hcall) {
	if c.done {
		return
	}
	now := h.clock.Now()
	if !h.budget.Withdraw(now) {
		h.refused++
		return
	}
	h.hedged++
	c.hedgeStart = now
	h.at(now.Add(c.ttft[1]), func() { h.firstToken(c, 1) })
}

// firstToken is attempt i of c producing its first token. The first to do
// so wins; the other is cancelled at once, so it never gets this far.
func (h *hedgeRun) firstToken(c *hcall, i int) {
	if c.done {
		return
	}
	c.done = true
	now := h.clock.Now()
	h.firstTokens = append(h.firstTokens, now.Sub(c.start))
	if h.hedge != nil {
		// What Do and Transport tell the Hedge: the first attempt's time
		// to first token when it won (or was alone), or, when the hedge
		// won, its time until it was cancelled, now. The hedge's own
		// time is never observed.
		h.hedge.Observe(hedgeTarget, now.Sub(c.start))
	}
	h.spend += HedgePrice.Of(cost.Usage{InputTokens: HedgeInputTokens, OutputTokens: HedgeOutputTokens})
	if !c.hedgeStart.IsZero() {
		loser := c.start.Add(c.ttft[0]) // when its first token would have come
		if i == 0 {
			loser = c.hedgeStart.Add(c.ttft[1])
		}
		h.spend += HedgePrice.Of(cost.Usage{InputTokens: HedgeInputTokens, OutputTokens: outputBy(loser, now)})
	}
}

// outputBy returns the output tokens an attempt whose first token came
// (or would have come) at first had produced by t.
func outputBy(first, t time.Time) int64 {
	if t.Before(first) {
		return 0
	}
	return min(1+int64(t.Sub(first).Seconds()*HedgeOutputRate), HedgeOutputTokens)
}

func (h *hedgeRun) result(strategy string, unhedged float64) HedgeResult {
	times := h.firstTokens
	slices.Sort(times)
	var sum time.Duration
	for _, t := range times {
		sum += t
	}
	n := float64(len(times))
	r := HedgeResult{
		Strategy: strategy,
		P50MS:    ms(nearestRank(times, 0.5)),
		P99MS:    ms(nearestRank(times, 0.99)),
		MeanMS:   ms(sum / time.Duration(len(times))),
		Hedged:   round6(float64(h.hedged) / n),
		Refused:  round6(float64(h.refused) / n),
	}
	if strategy == HedgeOn {
		r.ExtraSpend = round6(h.spend/unhedged - 1)
	}
	theory := hedgeTheory(strategy)
	r.P50TheoryMS = ms(quantileOf(theory.tail, 0.5))
	r.P99TheoryMS = ms(quantileOf(theory.tail, 0.99))
	r.ExtraSpendTheory = round6(theory.extraSpend)
	for tenths := range 10*hedgeChartSeconds + 1 {
		t := time.Duration(tenths) * time.Second / 10
		slower := len(times) - atMost(times, t)
		r.tail = append(r.tail, Point{X: t.Seconds(), Y: float64(slower) / n})
	}
	return r
}

// atMost returns how many of the sorted times are at most t.
func atMost(times []time.Duration, t time.Duration) int {
	i, _ := slices.BinarySearch(times, t+1)
	return i
}

// nearestRank returns the q-th quantile of sorted times: the smallest
// time that at least q of them do not exceed.
func nearestRank(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

func round6(v float64) float64 { return math.Round(v*1e6) / 1e6 }

// attemptTail returns P(T > t) for one attempt's time to first token T:
// (1 − s)·Q(ln(t/m)/σ) + s·Q(ln(t/(k·m))/σ), with Q the standard normal's
// upper tail, m the median, s the slow share and k the slow factor.
func attemptTail(t time.Duration) float64 {
	if t <= 0 {
		return 1
	}
	q := func(z float64) float64 { return math.Erfc(z/math.Sqrt2) / 2 }
	z := math.Log(t.Seconds()/HedgeMedian.Seconds()) / HedgeSigma
	return (1-HedgeSlowShare)*q(z) + HedgeSlowShare*q(z-math.Log(HedgeSlowFactor)/HedgeSigma)
}

// strategyTheory is what theory expects of a strategy.
type strategyTheory struct {
	tail       func(time.Duration) float64 // P(a call's first token > t)
	extraSpend float64
}

// hedgeTheory returns the theory of a strategy. Unhedged, a call's time
// to first token is its first attempt's, T1. Hedged after d, it is
// min(T1, d + T2), T2 the hedge's own, independent: P(> t) is
// P(T1 > t)·P(T2 > t − d) beyond d. The Hedge learns d as the 90th
// percentile of what it observes, which is that same minimum (the first
// attempt's time, or its time until the hedge won); up to d it equals T1,
// so its 90th percentile is T1's. A hedge is made for the calls whose
// first attempt is slower than d, a tenth of them, each one attempt's
// input more (a loser is cancelled before its first token). Theory leaves
// out the first 16 calls, which no hedge can help, and how the Hedge
// takes its percentile: the 230th of its 256 recent times, above which
// lie on average 27/257 of all times, so it hedges 10.5% of calls.
func hedgeTheory(strategy string) strategyTheory {
	if strategy == HedgeNone {
		return strategyTheory{tail: attemptTail}
	}
	const percentile = 0.9 // the zero rebound.Hedge's
	d := quantileOf(attemptTail, percentile)
	full := HedgePrice.Of(cost.Usage{InputTokens: HedgeInputTokens, OutputTokens: HedgeOutputTokens})
	input := HedgePrice.Of(cost.Usage{InputTokens: HedgeInputTokens})
	return strategyTheory{
		tail: func(t time.Duration) float64 {
			p := attemptTail(t)
			if t > d {
				p *= attemptTail(t - d)
			}
			return p
		},
		extraSpend: attemptTail(d) * input / full,
	}
}

// quantileOf returns the t at which a decreasing tail(t) falls to 1 − q,
// to the microsecond.
func quantileOf(tail func(time.Duration) float64, q float64) time.Duration {
	lo, hi := time.Duration(0), time.Hour
	for hi-lo > time.Microsecond {
		mid := lo + (hi-lo)/2
		if tail(mid) > 1-q {
			lo = mid
		} else {
			hi = mid
		}
	}
	return hi
}

// hedgeChartSeconds is how far the chart of the tail reaches.
const hedgeChartSeconds = 20

// Charts draws the share of calls slower than each time to first token,
// on a log scale, for each strategy, with theory dashed.
func (r HedgeReport) Charts() []Chart {
	c := Chart{
		Title:  "Calls slower than a time to first token",
		XLabel: "time to first token, s", YLabel: "share of calls slower", LogY: true,
		Caption: fmt.Sprintf("%d calls; dashed: theory, with the hedge after the 90th percentile of one attempt's time.", r.Calls),
	}
	for i, x := range r.Results {
		theory := hedgeTheory(x.Strategy)
		var curve []Point
		for _, p := range x.tail {
			if y := theory.tail(time.Duration(p.X * float64(time.Second))); y >= 1/float64(r.Calls) {
				curve = append(curve, Point{X: p.X, Y: y})
			}
		}
		c.Series = append(c.Series,
			Series{Name: x.Strategy + ", theory", Color: Palette(i), Points: curve, Dashed: true, NoLegend: true},
			Series{Name: x.Strategy, Color: Palette(i), Points: x.tail})
	}
	c.Series = append(c.Series, Series{Name: "theory", Color: legendGrey, Dashed: true})
	return []Chart{c}
}
