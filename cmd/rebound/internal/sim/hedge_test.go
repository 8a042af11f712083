package sim

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
)

// hedgeVerdict checks the bar on a report of the default size:
// p99 at least 3 times lower for at most 5% more spend, and every figure
// near theory's (see hedgeTheory for why the hedged share is 10.5%).
func hedgeVerdict(t *testing.T, r HedgeReport) {
	t.Helper()
	if len(r.Results) != 2 || r.Results[0].Strategy != HedgeNone || r.Results[1].Strategy != HedgeOn {
		t.Fatalf("seed %d: results %+v", r.Seed, r.Results)
	}
	none, hedge := r.Results[0], r.Results[1]
	t.Logf("seed %d: p50 %.0f/%.0f ms, p99 %.0f/%.0f ms (%.2fx lower), mean %.0f/%.0f ms, %.2f%% hedged, %+.2f%% spend",
		r.Seed, none.P50MS, hedge.P50MS, none.P99MS, hedge.P99MS, none.P99MS/hedge.P99MS, none.MeanMS, hedge.MeanMS,
		100*hedge.Hedged, 100*hedge.ExtraSpend)
	if none.P99MS < 3*hedge.P99MS || hedge.ExtraSpend > 0.05 || hedge.ExtraSpend <= 0 {
		t.Errorf("seed %d: p99 %.0f ms → %.0f ms for %+.2f%% spend; want at least 3 times lower for at most 5%% more",
			r.Seed, none.P99MS, hedge.P99MS, 100*hedge.ExtraSpend)
	}
	// Common random numbers: a hedge changes only calls slower than its
	// delay, and the median call is faster.
	if none.P50MS != hedge.P50MS || none.ExtraSpend != 0 || none.Hedged != 0 {
		t.Errorf("seed %d: none %+v, hedge %+v", r.Seed, none, hedge)
	}
	for _, x := range r.Results {
		if math.Abs(x.P50MS/x.P50TheoryMS-1) > 0.01 || math.Abs(x.P99MS/x.P99TheoryMS-1) > 0.05 {
			t.Errorf("seed %d, %s: p50 %.0f ms and p99 %.0f ms, theory %.0f ms and %.0f ms",
				r.Seed, x.Strategy, x.P50MS, x.P99MS, x.P50TheoryMS, x.P99TheoryMS)
		}
	}
	if hedge.Hedged < 0.1 || hedge.Hedged > 0.11 || hedge.Refused != 0 ||
		math.Abs(hedge.ExtraSpend-hedge.Hedged*hedgeInputShare) > 0.001 {
		t.Errorf("seed %d: %.4f hedged, %.4f refused, %+.4f spend; want a little over a tenth, none refused, an input each",
			r.Seed, hedge.Hedged, hedge.Refused, hedge.ExtraSpend)
	}
}

// hedgeInputShare is one attempt's input as a share of a whole call's
// price: what a hedge costs, its loser being cancelled before any output.
var hedgeInputShare = 2000 * 3.0 / (2000*3.0 + 500*15.0)

// TestHedge runs the default (seed 1, 100 000 calls) and wants
// the bar met by rebound's own rule.
func TestHedge(t *testing.T) {
	r, err := RunHedge(context.Background(), 1, HedgeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Scenario != "hedge" || r.Seed != 1 || r.Calls != DefaultHedgeCalls {
		t.Fatalf("header %q, seed %d, %d calls", r.Scenario, r.Seed, r.Calls)
	}
	hedgeVerdict(t, r)
}

// TestHedgeOtherSeeds wants the same verdict from other seeds: the rule
// is not tuned to one.
func TestHedgeOtherSeeds(t *testing.T) {
	for _, seed := range []uint64{2, 3, 4} {
		t.Run("", func(t *testing.T) {
			t.Parallel()
			r, err := RunHedge(context.Background(), seed, HedgeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			hedgeVerdict(t, r)
		})
	}
}

func TestHedgeIsDeterministic(t *testing.T) {
	c := HedgeConfig{Calls: 5000}
	a, err := RunHedge(context.Background(), 7, c)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunHedge(context.Background(), 7, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 7, different reports:\n%+v\n%+v", a, b)
	}
	other, _ := RunHedge(context.Background(), 8, c)
	if reflect.DeepEqual(a.Results, other.Results) {
		t.Fatal("seeds 7 and 8 gave the same results")
	}
}

// TestHedgeNeedsSamples: the zero Hedge makes no hedge before it knows 16
// first-token times, so 16 calls are the same calls with it or without.
func TestHedgeNeedsSamples(t *testing.T) {
	r, err := RunHedge(context.Background(), 1, HedgeConfig{Calls: 16})
	if err != nil {
		t.Fatal(err)
	}
	none, hedge := r.Results[0], r.Results[1]
	if none.P50MS != hedge.P50MS || none.P99MS != hedge.P99MS || none.MeanMS != hedge.MeanMS ||
		hedge.ExtraSpend != 0 || hedge.Hedged != 0 || !reflect.DeepEqual(none.tail, hedge.tail) {
		t.Errorf("16 calls: none %+v, hedge %+v", none, hedge)
	}
	r, _ = RunHedge(context.Background(), 1, HedgeConfig{Calls: 1000})
	if r.Results[1].Hedged == 0 {
		t.Error("1000 calls, no hedge")
	}
}

// TestHedgeTheory checks theory against the figures worked by hand:
// P(T > t) = 0.95 Q(ln t / 0.35) + 0.05 Q(ln(t/10) / 0.35); its 90th
// percentile, the delay, is 1.76 s; its median 1.023 s; its p99 13.4 s,
// where only slow attempts remain (0.05 Q(z) = 0.01 at z = 0.8416); and
// hedged, P(T1 > t) P(T2 > t − d) = 0.01 at 3.19 s.
func TestHedgeTheory(t *testing.T) {
	near := func(what string, got time.Duration, want, tolerance float64) {
		if math.Abs(got.Seconds()-want) > tolerance {
			t.Errorf("%s: %v, want %v s", what, got, want)
		}
	}
	none, hedge := hedgeTheory(HedgeNone), hedgeTheory(HedgeOn)
	near("delay", quantileOf(attemptTail, 0.9), 1.76, 0.01)
	near("p50", quantileOf(none.tail, 0.5), 1.023, 0.001)
	near("p99", quantileOf(none.tail, 0.99), 10*math.Exp(0.35*0.8416), 0.01)
	near("hedged p50", quantileOf(hedge.tail, 0.5), 1.023, 0.001)
	near("hedged p99", quantileOf(hedge.tail, 0.99), 3.19, 0.01)
	if none.extraSpend != 0 || math.Abs(hedge.extraSpend-0.1*hedgeInputShare) > 1e-6 {
		t.Errorf("extra spend %v and %v, want 0 and %v", none.extraSpend, hedge.extraSpend, 0.1*hedgeInputShare)
	}
	for _, q := range []float64{0.1, 0.5, 0.9, 0.99, 0.999} {
		if p := attemptTail(quantileOf(attemptTail, q)); math.Abs(p-(1-q)) > 1e-6 {
			t.Errorf("P(T > its %v quantile) = %v", q, p)
		}
	}
}

// TestOutputBy checks the billing rule of a cancelled attempt: nothing
// before its first token, then the first token and HedgeOutputRate a
// second, up to the call's output.
func TestOutputBy(t *testing.T) {
	first := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Duration
		want int64
	}{{-time.Nanosecond, 0}, {-time.Hour, 0}, {0, 1}, {time.Second, 51}, {time.Hour, HedgeOutputTokens}} {
		if got := outputBy(first, first.Add(tc.at)); got != tc.want {
			t.Errorf("%v after the first token: %d tokens, want %d", tc.at, got, tc.want)
		}
	}
}

func TestHedgeRefuses(t *testing.T) {
	for _, calls := range []int{-1, MaxHedgeCalls + 1} {
		if _, err := RunHedge(context.Background(), 1, HedgeConfig{Calls: calls}); err == nil {
			t.Errorf("%d calls accepted", calls)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := RunHedge(ctx, 1, HedgeConfig{}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}

// TestHedgeModelIsTheEnginesRace runs the scenario's calls through
// rebound.Do's own hedged race, with a zero Hedge and a zero RetryBudget,
// and wants what the scenario's model of that race gives: the same times
// to first token, the same hedges, the same spend. The command cannot run
// Do's race in virtual time (the race times its delay by the real clock,
// in goroutines of its own), so the scenario models it; this test runs
// the race in a synctest bubble, where the real clock is virtual too.
func TestHedgeModelIsTheEnginesRace(t *testing.T) {
	const seed, calls = 5, 3000
	t.Logf("seed %d, %d calls", seed, calls)
	model := &hedgeRun{calls: calls, rng: rand.New(rand.NewPCG(seed, hedgeStream)), budget: &rebound.RetryBudget{}, hedge: &rebound.Hedge{}}
	if err := model.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	engine := hedgeThroughDo(t, seed, calls)
	slices.Sort(model.firstTokens)
	slices.Sort(engine.firstTokens)
	if !slices.Equal(model.firstTokens, engine.firstTokens) {
		for i := range model.firstTokens {
			if model.firstTokens[i] != engine.firstTokens[i] {
				t.Fatalf("the %dth fastest first token: %v in the model, %v through rebound.Do", i, model.firstTokens[i], engine.firstTokens[i])
			}
		}
	}
	if model.hedged != engine.hedged || model.refused != engine.refused || math.Abs(model.spend/engine.spend-1) > 1e-9 {
		t.Errorf("model: %d hedged, %d refused, $%.6f; rebound.Do: %d hedged, %d refused, $%.6f",
			model.hedged, model.refused, model.spend, engine.hedged, engine.refused, engine.spend)
	}
	if model.hedged == 0 {
		t.Error("no call was hedged: the comparison says nothing of the race")
	}
}

// hedgeThroughDo makes the hedge scenario's calls, drawn as the model
// draws them, through rebound.Do under a zero Hedge and a zero
// RetryBudget, in a synctest bubble; each attempt waits for its own time
// to first token, and one cancelled as the loser is billed as the model
// bills it.
func hedgeThroughDo(t *testing.T, seed uint64, calls int) (r struct {
	firstTokens     []time.Duration
	hedged, refused int
	spend           float64
}) {
	synctest.Test(t, func(t *testing.T) {
		draws := &hedgeRun{rng: rand.New(rand.NewPCG(seed, hedgeStream))}
		var mu sync.Mutex // guards r
		p := rebound.Policy{MaxAttempts: 1, Hedge: &rebound.Hedge{}, Budget: &rebound.RetryBudget{},
			Observer: rebound.ObserverFunc(func(e rebound.Event) {
				if e.Type == rebound.EventHedge {
					mu.Lock()
					r.hedged++
					mu.Unlock()
				}
			})}
		full := HedgePrice.Of(cost.Usage{InputTokens: HedgeInputTokens, OutputTokens: HedgeOutputTokens})
		var wg sync.WaitGroup
		for i := range calls {
			time.Sleep(draws.interarrival())
			ttft := [2]time.Duration{draws.firstTokenTime(), draws.firstTokenTime()}
			wg.Go(func() {
				start := time.Now()
				var n atomic.Int32
				_, err := rebound.Do(t.Context(), p, func(ctx context.Context) (struct{}, error) {
					attempt, began := n.Add(1)-1, time.Now()
					first := time.NewTimer(ttft[attempt])
					defer first.Stop()
					select {
					case <-first.C:
						mu.Lock()
						r.firstTokens = append(r.firstTokens, time.Since(start))
						r.spend += full
						mu.Unlock()
						return struct{}{}, nil
					case <-ctx.Done(): // lost the race
						mu.Lock()
						r.spend += HedgePrice.Of(cost.Usage{InputTokens: HedgeInputTokens,
							OutputTokens: outputBy(began.Add(ttft[attempt]), time.Now())})
						mu.Unlock()
						return struct{}{}, context.Cause(ctx)
					}
				})
				if err != nil {
					t.Errorf("call %d: %v", i, err)
				}
			})
		}
		wg.Wait()
	})
	return r
}
