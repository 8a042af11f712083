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
	"time"

	"github.com/rebound-go/rebound"
)

// The backoff strategies of Brooker's OCC experiment, named as in his
// article.
const (
	OCCExponential  = "exponential"
	OCCDecorrelated = "decorrelated"
	OCCEqual        = "equal"
	OCCFull         = "full"
	OCCNone         = "none"
)

// OCCStrategies returns the names of the OCC experiment's strategies, in
// the order of the published table.
func OCCStrategies() []string {
	return []string{OCCExponential, OCCDecorrelated, OCCEqual, OCCFull, OCCNone}
}

// DefaultOCCClients returns the client counts of the published table.
func DefaultOCCClients() []int { return []int{10, 20, 50, 100, 150, 190} }

// DefaultOCCTrials is how many trials each (strategy, clients) cell
// averages over, as in the published table.
const DefaultOCCTrials = 100

// Brooker's model: every message hop takes |Normal(10 ms, 2 ms)|.
const (
	occHopMean   = 10 * time.Millisecond
	occHopStdDev = 2 * time.Millisecond
)

// OCCPolicy returns the rebound Policy that gives Brooker's backoff for
// strategy, its jitter drawn from rng. Brooker's raw delay before retry n
// is min(2 s, 5 ms · 2ⁿ), which is rebound's exponential shape from a
// 10 ms base; his decorrelated jitter starts from 5 ms. Attempts and the
// wait budget are unbounded for all practical purposes: a client retries
// until its write succeeds.
func OCCPolicy(strategy string, rng interface{ Int64N(int64) int64 }) (rebound.Policy, error) {
	p := rebound.Policy{
		MaxAttempts: 1 << 30,
		MaxDelay:    2 * time.Second,
		Multiplier:  2,
		WaitBudget:  100 * time.Hour,
		Rand:        rng,
	}
	switch strategy {
	case OCCNone:
		p.BaseDelay, p.Jitter = rebound.NoDelay, rebound.JitterNone
	case OCCExponential:
		p.BaseDelay, p.Jitter = 10*time.Millisecond, rebound.JitterNone
	case OCCFull:
		p.BaseDelay, p.Jitter = 10*time.Millisecond, rebound.JitterFull
	case OCCEqual:
		p.BaseDelay, p.Jitter = 10*time.Millisecond, rebound.JitterEqual
	case OCCDecorrelated:
		p.BaseDelay, p.Jitter = 5*time.Millisecond, rebound.JitterDecorrelated
	default:
		return rebound.Policy{}, fmt.Errorf("sim: unknown OCC strategy %q (want one of %v)", strategy, OCCStrategies())
	}
	return p, nil
}

// OCCConfig narrows the OCC experiment. Its zero value is the published
// table: every strategy, DefaultOCCClients, DefaultOCCTrials trials.
type OCCConfig struct {
	// Strategies to run, in this order. Empty means OCCStrategies().
	Strategies []string
	// Clients are the client counts N to run, in this order. Empty means
	// DefaultOCCClients().
	Clients []int
	// Trials each result averages over. Zero means DefaultOCCTrials.
	Trials int
	// Progress, if set, is told of each result as soon as it is known.
	Progress func(OCCResult)
}

// Validate reports the first thing wrong with c, in one line.
func (c OCCConfig) Validate() error {
	for _, s := range c.Strategies {
		if !slices.Contains(OCCStrategies(), s) {
			return fmt.Errorf("sim: unknown OCC strategy %q (want one of %v)", s, OCCStrategies())
		}
	}
	for _, n := range c.Clients {
		if n < 1 {
			return fmt.Errorf("sim: client counts must be positive (got %d)", n)
		}
	}
	if c.Trials < 0 {
		return fmt.Errorf("sim: trials must be positive (got %d)", c.Trials)
	}
	return nil
}

// OCCResult is one strategy at one client count, averaged over trials.
type OCCResult struct {
	Strategy string `json:"strategy"`
	Clients  int    `json:"clients"`
	// Writes is the mean number of writes (Brooker's "calls") a trial
	// sent to the server.
	Writes float64 `json:"writes"`
	// CompletionMS is the mean time, in milliseconds of virtual time, of
	// a trial's last event: the last client learning its write succeeded.
	CompletionMS float64 `json:"completion_ms"`
	// Succeeded is the mean number of clients whose write succeeded; with
	// the experiment's policies it is always Clients.
	Succeeded float64 `json:"succeeded"`
}

// OCCReport is the result of RunOCC.
type OCCReport struct {
	Scenario string      `json:"scenario"` // "occ"
	Seed     uint64      `json:"seed"`
	Trials   int         `json:"trials"`
	Results  []OCCResult `json:"results"`
}

// RunOCC runs Brooker's optimistic-concurrency experiment ("Exponential
// Backoff and Jitter", AWS Architecture Blog, 2015) as a discrete-event
// simulation in virtual time, each client a call to rebound.Run: its
// backoff and its waits are rebound's own, under a virtual clock.
//
// One server holds one row with a version. N clients start at once; each
// reads the version and then writes it back, and the write succeeds only
// if the version is still current (which bumps it). A client whose write
// fails waits as its policy says and reads again; it stops after its
// first successful write. Every message hop takes
// |Normal(10 ms, 2 ms)|.
//
// Each trial draws from its own PCG generator, seeded by seed and by the
// trial's strategy, client count and number, so a cell's figures do not
// depend on which other cells run. The same seed gives the same report.
func RunOCC(ctx context.Context, seed uint64, c OCCConfig) (OCCReport, error) {
	if err := c.Validate(); err != nil {
		return OCCReport{}, err
	}
	strategies, clients, trials := c.Strategies, c.Clients, c.Trials
	if len(strategies) == 0 {
		strategies = OCCStrategies()
	}
	if len(clients) == 0 {
		clients = DefaultOCCClients()
	}
	if trials == 0 {
		trials = DefaultOCCTrials
	}
	report := OCCReport{Scenario: "occ", Seed: seed, Trials: trials}
	var t occTrial
	defer t.endProcs()
	for _, strategy := range strategies {
		for _, n := range clients {
			var writes, succeeded int
			var completion time.Duration
			for trial := range trials {
				if err := ctx.Err(); err != nil {
					return OCCReport{}, context.Cause(ctx)
				}
				rng := rand.New(rand.NewPCG(seed, occStream(strategy, n, trial)))
				p, err := OCCPolicy(strategy, rng)
				if err != nil {
					return OCCReport{}, err
				}
				w, done, last, err := t.run(ctx, p, n, rng)
				if err != nil {
					return OCCReport{}, err
				}
				writes += w
				succeeded += done
				completion += last
			}
			r := OCCResult{
				Strategy:     strategy,
				Clients:      n,
				Writes:       float64(writes) / float64(trials),
				CompletionMS: float64(completion) / float64(time.Millisecond) / float64(trials),
				Succeeded:    float64(succeeded) / float64(trials),
			}
			report.Results = append(report.Results, r)
			if c.Progress != nil {
				c.Progress(r)
			}
		}
	}
	return report, nil
}

// occStream is the second PCG seed of one trial.
func occStream(strategy string, clients, trial int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(strategy))
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], uint64(clients))
	binary.LittleEndian.PutUint64(b[8:], uint64(trial))
	h.Write(b[:])
	return h.Sum64()
}

// errConflict is how a write fails: another client bumped the version
// since this one read it. It is transient: read again, and write again.
var errConflict = errors.New("sim: the version read is no longer current")

// occTrial is a trial: a row with a version and the clients, each a
// proc that runs rebound.Run until its write succeeds.
type occTrial struct {
	scheduler
	policy            rebound.Policy
	rng               *rand.Rand
	version           int64 // the row's current version
	writes, succeeded int
	last              time.Time // the trial's last event so far
}

// run runs one trial of n clients under p and returns the writes the
// server saw, how many clients' writes succeeded, and the time of the
// trial's last event. It stops with ctx's cause when ctx is done. The
// trials of a run take turns with one occTrial, whose procs the next
// trial's clients reuse; the run ends them (endProcs) when it is done.
func (t *occTrial) run(ctx context.Context, p rebound.Policy, n int, rng *rand.Rand) (writes, succeeded int, last time.Duration, err error) {
	start := time.Date(2015, 3, 4, 0, 0, 0, 0, time.UTC)
	t.policy, t.rng, t.last, t.version, t.writes, t.succeeded = p, rng, start, 0, 0, 0
	t.clock, t.events, t.seq = NewClock(start), t.events[:0], 0
	for range n {
		t.spawn(time.Time{}, t.client)
	}
	if err := t.runUntil(ctx, start, start.Add(math.MaxInt64), nil); err != nil {
		return 0, 0, 0, err
	}
	return t.writes, t.succeeded, t.last.Sub(start), nil
}

// client reads the row and writes it back, again after each conflict as
// its policy says, until its write succeeds.
func (t *occTrial) client(ctx context.Context) {
	// The hop of each read after the first is drawn as the client learns
	// its write failed, right after its policy has drawn the wait (its
	// clock's Sleep comes next): the order of Brooker's simulator, which
	// this one keeps draw for draw.
	var read time.Duration
	draw := func() { read = t.hop() }
	ctx = rebound.WithClock(ctx, drawingClock{procClock{&t.scheduler}, draw})
	draw()
	err := rebound.Run(ctx, t.policy, func(ctx context.Context) error { return t.attempt(ctx, read) })
	if err == nil {
		t.succeeded++
	}
	t.last = t.clock.Now()
}

// attempt is one read and write of a client whose read takes read to
// reach the server. The messages are events, each drawing the next hop
// as it arrives; the client waits for the last.
func (t *occTrial) attempt(ctx context.Context, read time.Duration) error {
	p, ok := t.self(), false
	after := func(d time.Duration, fn func()) { t.at(t.clock.Now().Add(d), fn) }
	after(read, func() { // the read reaches the server
		version := t.version
		after(t.hop(), func() { // the version comes back
			after(t.hop(), func() { // the write reaches the server
				t.writes++
				if ok = version == t.version; ok {
					t.version++
				}
				after(t.hop(), func() { t.resume(p) }) // the outcome comes back
			})
		})
	})
	if !t.park() {
		return context.Cause(ctx)
	}
	if !ok {
		return errConflict
	}
	return nil
}

// hop draws one message hop: |Normal(10 ms, 2 ms)|.
func (t *occTrial) hop() time.Duration {
	return time.Duration(math.Abs(float64(occHopMean) + float64(occHopStdDev)*t.rng.NormFloat64()))
}

// drawingClock is a procClock that calls draw before each Sleep.
type drawingClock struct {
	procClock
	draw func()
}

func (c drawingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.draw()
	return c.procClock.Sleep(ctx, d)
}

// OCCFigure is a published result of the OCC experiment.
type OCCFigure struct {
	Writes     float64
	Completion time.Duration
}

// occPublished is the table of Brooker's OCC simulator re-run with 100
// trials and seed 2015 (his "Exponential Backoff and Jitter", AWS
// Architecture Blog, 2015): mean writes and completion time in seconds,
// per client count, in the column order of OCCStrategies.
var occPublished = []struct {
	clients int
	cells   [5]struct{ writes, seconds float64 }
}{
	{10, [5]struct{ writes, seconds float64 }{{50, 3.4}, {37, 0.45}, {42, 0.75}, {39, 0.46}, {50, 0.38}}},
	{20, [5]struct{ writes, seconds float64 }{{150, 14.3}, {100, 0.81}, {108, 1.52}, {99, 0.95}, {152, 0.61}}},
	{50, [5]struct{ writes, seconds float64 }{{622, 36.4}, {374, 2.16}, {347, 4.19}, {333, 2.99}, {688, 1.14}}},
	{100, [5]struct{ writes, seconds float64 }{{1856, 63.5}, {1005, 4.58}, {812, 6.63}, {796, 5.00}, {2430, 2.04}}},
	{150, [5]struct{ writes, seconds float64 }{{3546, 85.7}, {1770, 6.51}, {1322, 8.16}, {1318, 6.41}, {5140, 2.88}}},
	{190, [5]struct{ writes, seconds float64 }{{5154, 100.9}, {2438, 7.93}, {1759, 9.33}, {1773, 7.45}, {8009, 3.54}}},
}

// OCCPublished returns the published figure for strategy at clients
// clients, if the published table has one.
func OCCPublished(strategy string, clients int) (OCCFigure, bool) {
	col := slices.Index(OCCStrategies(), strategy)
	if col < 0 {
		return OCCFigure{}, false
	}
	for _, row := range occPublished {
		if row.clients == clients {
			c := row.cells[col]
			return OCCFigure{Writes: c.writes, Completion: time.Duration(c.seconds * float64(time.Second))}, true
		}
	}
	return OCCFigure{}, false
}
