package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/rebound-go/rebound"
)

// DefaultIIDRates returns the failure probabilities p the iid experiment
// runs by default: 0 to 0.5 in steps of 0.05.
func DefaultIIDRates() []float64 {
	return []float64{0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5}
}

// DefaultIIDAttempts returns the MaxAttempts of the policies the iid
// experiment compares by default.
func DefaultIIDAttempts() []int { return []int{1, 2, 3, 4, 6} }

// DefaultIIDTrials is how many calls each (attempts, p) cell makes by
// default.
const DefaultIIDTrials = 100000

// IIDConfig narrows the iid experiment. Its zero value runs
// DefaultIIDAttempts against DefaultIIDRates, DefaultIIDTrials calls each.
type IIDConfig struct {
	// Attempts are the policies' MaxAttempts, in this order. Empty means
	// DefaultIIDAttempts().
	Attempts []int
	// Rates are the failure probabilities p, in this order, each within
	// [0, 1]. Empty means DefaultIIDRates().
	Rates []float64
	// Trials is how many calls each result counts. Zero means
	// DefaultIIDTrials.
	Trials int
	// Progress, if set, is told of each result as soon as it is known.
	Progress func(IIDResult)
}

// Validate reports the first thing wrong with c, in one line.
func (c IIDConfig) Validate() error {
	for _, n := range c.Attempts {
		if n < 1 {
			return fmt.Errorf("sim: attempts must be at least 1 (got %d)", n)
		}
	}
	for _, p := range c.Rates {
		if !(p >= 0 && p <= 1) { // also refuses NaN
			return fmt.Errorf("sim: failure probabilities must be within [0, 1] (got %v)", p)
		}
	}
	if c.Trials < 0 {
		return fmt.Errorf("sim: trials must be positive (got %d)", c.Trials)
	}
	return nil
}

// IIDResult is one policy at one failure probability: what the calls
// measured beside what theory says.
type IIDResult struct {
	MaxAttempts int     `json:"max_attempts"`
	P           float64 `json:"p"`
	// Success is the share of calls that succeeded; SuccessBound is the
	// theoretical 1 − p^MaxAttempts.
	Success      float64 `json:"success"`
	SuccessBound float64 `json:"success_bound"`
	// Load is the mean number of attempts per call; LoadBound is the
	// theoretical (1 − p^MaxAttempts) / (1 − p).
	Load      float64 `json:"load"`
	LoadBound float64 `json:"load_bound"`
}

// IIDReport is the result of RunIID.
type IIDReport struct {
	Scenario string      `json:"scenario"` // "iid"
	Seed     uint64      `json:"seed"`
	Results  []IIDResult `json:"results"`
}

// IIDTheory returns the success rate and the mean attempts per call of a
// call that makes at most attempts attempts, each failing independently
// with probability p: 1 − pⁿ and 1 + p + … + pⁿ⁻¹ = (1 − pⁿ) / (1 − p).
func IIDTheory(p float64, attempts int) (success, load float64) {
	if p == 1 {
		return 0, float64(attempts)
	}
	pn := math.Pow(p, float64(attempts))
	return 1 - pn, (1 - pn) / (1 - p)
}

// iidPolicy is the Policy of the iid experiment: attempts attempts, no
// waiting between them.
func iidPolicy(attempts int) rebound.Policy {
	return rebound.Policy{MaxAttempts: attempts, BaseDelay: rebound.NoDelay, Jitter: rebound.JitterNone}
}

// RunIID runs the independent-failures experiment: every attempt of a call
// fails with probability p, independently of every other, and each call
// is a rebound.Run under a policy of MaxAttempts attempts and no delay,
// which decides after each failure (a transient one) whether to try
// again. For each
// (attempts, p) cell it makes Trials calls and reports the share that
// succeeded and the attempts they made, beside the theoretical values.
//
// Each cell draws from its own PCG generator, seeded by seed and by the
// cell's attempts and p, so a cell's figures do not depend on which other
// cells run. The same seed gives the same report.
func RunIID(ctx context.Context, seed uint64, c IIDConfig) (IIDReport, error) {
	if err := c.Validate(); err != nil {
		return IIDReport{}, err
	}
	attempts, rates, trials := c.Attempts, c.Rates, c.Trials
	if len(attempts) == 0 {
		attempts = DefaultIIDAttempts()
	}
	if len(rates) == 0 {
		rates = DefaultIIDRates()
	}
	if trials == 0 {
		trials = DefaultIIDTrials
	}
	report := IIDReport{Scenario: "iid", Seed: seed}
	// The policies wait for nothing; a clock that never sleeps keeps it so.
	simCtx := rebound.WithClock(context.Background(), NewClock(time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)))
	for _, n := range attempts {
		policy := iidPolicy(n)
		if err := policy.Validate(); err != nil {
			return IIDReport{}, err
		}
		for _, p := range rates {
			rng := rand.New(rand.NewPCG(seed, iidStream(n, p)))
			var succeeded, made int
			attempt := func(context.Context) error {
				made++
				if rng.Float64() >= p {
					return nil
				}
				return errIIDFailure
			}
			for trial := range trials {
				if trial%4096 == 0 && ctx.Err() != nil {
					return IIDReport{}, context.Cause(ctx)
				}
				if rebound.Run(simCtx, policy, attempt) == nil {
					succeeded++
				}
			}
			success, load := IIDTheory(p, n)
			r := IIDResult{
				MaxAttempts:  n,
				P:            p,
				Success:      float64(succeeded) / float64(trials),
				SuccessBound: success,
				Load:         float64(made) / float64(trials),
				LoadBound:    load,
			}
			report.Results = append(report.Results, r)
			if c.Progress != nil {
				c.Progress(r)
			}
		}
	}
	return report, nil
}

// errIIDFailure is how an attempt of the iid experiment fails: a
// transient error, which the policy retries.
var errIIDFailure = errors.New("sim: the attempt failed")

// iidStream is the second PCG seed of one cell.
func iidStream(attempts int, p float64) uint64 {
	h := fnv.New64a()
	h.Write([]byte("iid"))
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(attempts))
	binary.LittleEndian.PutUint64(b[8:], math.Float64bits(p))
	h.Write(b[:])
	return h.Sum64()
}

// Charts draws the report for WriteHTML: the success rate and the load
// against p, a colour per MaxAttempts, measured results as dots on the
// dashed theoretical curves.
func (r IIDReport) Charts() []Chart {
	var attempts []int
	var lo, hi float64
	for i, res := range r.Results {
		if !slices.Contains(attempts, res.MaxAttempts) {
			attempts = append(attempts, res.MaxAttempts)
		}
		if i == 0 || res.P < lo {
			lo = res.P
		}
		if i == 0 || res.P > hi {
			hi = res.P
		}
	}
	success := Chart{
		Title:   "Success rate against the failure probability of one attempt",
		XLabel:  "p, the probability that one attempt fails",
		YLabel:  "calls that succeed",
		FitY:    true,
		Caption: "Dots: measured through rebound.Run. Dashed: 1 − pⁿ for n attempts.",
	}
	load := Chart{
		Title:   "Load against the failure probability of one attempt",
		XLabel:  "p, the probability that one attempt fails",
		YLabel:  "attempts per call",
		FitY:    true,
		Caption: "Dots: measured through rebound.Run. Dashed: (1 − pⁿ) / (1 − p) for n attempts.",
	}
	for i, n := range attempts {
		name := strconv.Itoa(n) + " attempts"
		if n == 1 {
			name = "1 attempt"
		}
		color := Palette(i)
		var measuredS, measuredL, theoryS, theoryL []Point
		for _, res := range r.Results {
			if res.MaxAttempts == n {
				measuredS = append(measuredS, Point{res.P, res.Success})
				measuredL = append(measuredL, Point{res.P, res.Load})
			}
		}
		const steps = 100
		for k := range steps + 1 {
			p := lo + (hi-lo)*float64(k)/steps
			s, l := IIDTheory(p, n)
			theoryS = append(theoryS, Point{p, s})
			theoryL = append(theoryL, Point{p, l})
			if hi == lo {
				break
			}
		}
		success.Series = append(success.Series,
			Series{Name: name + ", theory", Color: color, Points: theoryS, Dashed: true, NoLegend: true},
			Series{Name: name, Color: color, Points: measuredS, DotsOnly: true})
		load.Series = append(load.Series,
			Series{Name: name + ", theory", Color: color, Points: theoryL, Dashed: true, NoLegend: true},
			Series{Name: name, Color: color, Points: measuredL, DotsOnly: true})
	}
	theory := Series{Name: "theory", Color: legendGrey, Dashed: true}
	success.Series = append(success.Series, theory)
	load.Series = append(load.Series, theory)
	return []Chart{success, load}
}
