// Package bench runs the retry experiments of the 429 article ("rebound
// bench"): rebound's Run against the chaos server over loopback HTTP, the
// calls of each row one after another, and its figures beside the
// article's.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// Report is the JSON object "rebound bench --json" prints.
type Report struct {
	Seed        uint64         `json:"seed"`
	NoRetry     NoRetryRow     `json:"no_retry"`
	FullJitter  FullJitterRow  `json:"full_jitter"`
	Always400   Always400Row   `json:"always_400"`
	RetryAfter  RetryAfterRow  `json:"retry_after"`
	Herd        HerdRow        `json:"herd"`
	Budget      BudgetRow      `json:"budget"`
	Idempotency IdempotencyRow `json:"idempotency"`
}

// NoRetryRow is the experiment without retries: each call made once
// against a server failing FailRate of requests.
type NoRetryRow struct {
	Calls          int     `json:"calls"`
	FailRate       float64 `json:"fail_rate"`
	Succeeded      int     `json:"succeeded"`
	ServerRequests int     `json:"server_requests"`
}

// FullJitterRow is the experiment with MaxAttempts attempts and full
// jitter from BaseMS: the waits, the wall time, and the attempt each
// success came at.
type FullJitterRow struct {
	Calls            int     `json:"calls"`
	MaxAttempts      int     `json:"max_attempts"`
	BaseMS           int64   `json:"base_ms"`
	MaxMS            int64   `json:"max_ms"`
	Succeeded        int     `json:"succeeded"`
	ServerRequests   int     `json:"server_requests"`
	TotalWaitMS      float64 `json:"total_wait_ms"`
	WallMS           float64 `json:"wall_ms"`
	SuccessByAttempt []int   `json:"success_by_attempt"`
}

// Always400Row is a call to a server that always answers 400: it is
// never retried.
type Always400Row struct {
	ServerRequests int     `json:"server_requests"`
	WallMS         float64 `json:"wall_ms"`
}

// RetryAfterRow is a 429 with a Retry-After hint of HintS seconds,
// honoured, and clamped to CappedMaxServerWaitMS.
type RetryAfterRow struct {
	HintS int `json:"hint_s"`
	// PlannedMS is the wait rebound decided on; WaitedMS the sleep as it
	// happened, which a busy machine makes longer.
	PlannedMS             float64 `json:"planned_ms"`
	WaitedMS              float64 `json:"waited_ms"`
	CallMS                float64 `json:"call_ms"`
	CappedMaxServerWaitMS int64   `json:"capped_max_server_wait_ms"`
	CappedPlannedMS       float64 `json:"capped_planned_ms"`
	CappedWaitedMS        float64 `json:"capped_waited_ms"`
	CappedCallMS          float64 `json:"capped_call_ms"`
}

// HerdRow is Clients calls failing together and retrying once after
// BaseMS: the most that wake in one 10 ms window, without and with
// jitter.
type HerdRow struct {
	Clients             int   `json:"clients"`
	BaseMS              int64 `json:"base_ms"`
	NoJitterMaxIn10ms   int   `json:"no_jitter_max_in_10ms"`
	FullJitterMaxIn10ms int   `json:"full_jitter_max_in_10ms"`
	ServerRequests      int   `json:"server_requests"`
}

// BudgetRow is a call to a server that is down under a wait budget:
// when and why it gave up.
type BudgetRow struct {
	MaxAttempts    int     `json:"max_attempts"`
	WaitBudgetMS   int64   `json:"wait_budget_ms"`
	GaveUpAfterMS  float64 `json:"gave_up_after_ms"`
	WaitedMS       float64 `json:"waited_ms"`
	ServerRequests int     `json:"server_requests"`
	StopReason     string  `json:"stop_reason"`
}

// IdempotencyRow is a call to a server that is down, with side effects
// (sent once) and without (retried).
type IdempotencyRow struct {
	MaxAttempts           int `json:"max_attempts"`
	NonIdempotentRequests int `json:"non_idempotent_requests"`
	IdempotentRequests    int `json:"idempotent_requests"`
}

// The 429 article's experiments, as it ran them.
const (
	benchCalls    = 200
	benchFailRate = 0.35
	herdClients   = 120
	herdBase      = 100 * time.Millisecond
	herdWindow    = 10 * time.Millisecond
)

// Run runs every experiment against a chaos server of its own on
// loopback and tells progress on progress, a line at a time.
func Run(ctx context.Context, seed uint64, progress io.Writer) (*Report, error) {
	srv, err := chaos.New(chaos.Config{Seed: seed, FailRate: benchFailRate, RetryAfter: time.Second})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(ln)
	defer hs.Close()

	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = herdClients
	defer transport.CloseIdleConnections()
	b := &runner{
		srv: srv, url: "http://" + ln.Addr().String() + "/v1/chat/completions",
		client: &http.Client{Transport: transport, Timeout: 30 * time.Second},
		seed:   seed, progress: progress,
	}
	r := &Report{Seed: seed}
	fmt.Fprintf(progress, "rebound bench: seed %d, chaos server at %s\n", seed, b.url)
	steps := []struct {
		name string
		run  func(context.Context, *Report) error
	}{
		{"no_retry", b.noRetry}, {"full_jitter", b.fullJitter}, {"always_400", b.always400},
		{"retry_after", b.retryAfter}, {"herd", b.herd}, {"budget", b.budget}, {"idempotency", b.idempotency},
	}
	for i, s := range steps {
		fmt.Fprintf(progress, "rebound bench: [%d/%d] %s…", i+1, len(steps), s.name)
		start := time.Now()
		srv.Reset()
		if err := s.run(ctx, r); err != nil {
			fmt.Fprintln(progress)
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(progress, " %v\n", time.Since(start).Round(time.Millisecond))
	}
	return r, nil
}

type runner struct {
	srv      *chaos.Server
	url      string
	client   *http.Client
	seed     uint64
	progress io.Writer
}

// get is one call: a GET in the given chaos mode; any status but 200 is an
// *rebound.HTTPError.
func (b *runner) get(ctx context.Context, mode string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url, nil)
	if err != nil {
		return rebound.Permanent(err)
	}
	req.Header.Set(chaos.HeaderMode, mode)
	resp, err := b.client.Do(req)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return rebound.NewHTTPError(resp)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return err
}

// rng returns the jitter source of one experiment (or one herd client):
// seeded, so that the same seed gives the same waits.
func (b *runner) rng(stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(b.seed, stream))
}

// waitTally sums the waits a call's Observer sees and notes the attempt
// that succeeded.
type waitTally struct {
	waited    time.Duration
	succeeded int // attempt number of the success, 0 if none
}

func (w *waitTally) Observe(e rebound.Event) {
	switch {
	case e.Type == rebound.EventRetry:
		w.waited += e.Wait
	case e.Type == rebound.EventAttempt && e.Err == nil:
		w.succeeded = e.Attempt
	}
}

// unexpected reports an error that is not the chaos server's doing: a
// broken bench, not a data point.
func unexpected(err error) error {
	var herr *rebound.HTTPError
	if err == nil || errors.As(err, &herr) {
		return nil
	}
	return err
}

func (b *runner) noRetry(ctx context.Context, r *Report) error {
	row := NoRetryRow{Calls: benchCalls, FailRate: benchFailRate}
	for range benchCalls {
		err := rebound.Run(ctx, rebound.Policy{MaxAttempts: 1}, func(ctx context.Context) error { return b.get(ctx, chaos.ModeRandom) })
		if err := unexpected(err); err != nil {
			return err
		}
		if err == nil {
			row.Succeeded++
		}
	}
	row.ServerRequests = b.srv.Stats().Requests
	r.NoRetry = row
	return nil
}

func (b *runner) fullJitter(ctx context.Context, r *Report) error {
	p := rebound.Policy{MaxAttempts: 4, BaseDelay: 20 * time.Millisecond, MaxDelay: 5 * time.Second, Multiplier: 2,
		Jitter: rebound.JitterFull, Rand: b.rng(1)}
	row := FullJitterRow{Calls: benchCalls, MaxAttempts: p.MaxAttempts, BaseMS: p.BaseDelay.Milliseconds(),
		MaxMS: p.MaxDelay.Milliseconds(), SuccessByAttempt: make([]int, p.MaxAttempts)}
	var waited time.Duration
	start := time.Now()
	for range benchCalls {
		var tally waitTally
		p.Observer = &tally
		err := rebound.Run(ctx, p, func(ctx context.Context) error { return b.get(ctx, chaos.ModeRandom) })
		if err := unexpected(err); err != nil {
			return err
		}
		waited += tally.waited
		if tally.succeeded > 0 {
			row.Succeeded++
			row.SuccessByAttempt[tally.succeeded-1]++
		}
	}
	row.WallMS = millis(time.Since(start))
	row.TotalWaitMS = millis(waited)
	row.ServerRequests = b.srv.Stats().Requests
	r.FullJitter = row
	return nil
}

func (b *runner) always400(ctx context.Context, r *Report) error {
	start := time.Now()
	err := rebound.Run(ctx, rebound.Policy{}, func(ctx context.Context) error { return b.get(ctx, chaos.ModeBadRequest) })
	wall := time.Since(start)
	var herr *rebound.HTTPError
	if !errors.As(err, &herr) || herr.StatusCode != http.StatusBadRequest {
		return fmt.Errorf("want a 400, got %v", err)
	}
	r.Always400 = Always400Row{ServerRequests: b.srv.Stats().Requests, WallMS: millis(wall)}
	return nil
}

// retryAfter: the first attempt meets 429 with Retry-After: 1, the second
// succeeds; once honouring the hint, once clamping it to 300 ms.
func (b *runner) retryAfter(ctx context.Context, r *Report) error {
	// waited is measured, from the end of the first attempt to the start
	// of the second: the sleep as it happened, not as it was planned.
	call := func(p rebound.Policy) (planned, waited, took time.Duration, err error) {
		var failedAt time.Time
		var tally waitTally
		p.Observer = &tally
		attempt := 0
		start := time.Now()
		err = rebound.Run(ctx, p, func(ctx context.Context) error {
			attempt++
			if attempt == 1 {
				err := b.get(ctx, chaos.ModeRetryAfter)
				failedAt = time.Now()
				return err
			}
			waited = time.Since(failedAt)
			return b.get(ctx, chaos.ModeOK)
		})
		return tally.waited, waited, time.Since(start), err
	}
	row := RetryAfterRow{HintS: 1, CappedMaxServerWaitMS: 300}
	planned, waited, took, err := call(rebound.Policy{MaxAttempts: 2, BaseDelay: 20 * time.Millisecond})
	if err != nil {
		return err
	}
	row.PlannedMS, row.WaitedMS, row.CallMS = millis(planned), millis(waited), millis(took)
	planned, waited, took, err = call(rebound.Policy{MaxAttempts: 2, BaseDelay: 20 * time.Millisecond,
		ServerWait: rebound.ServerWaitClamp, MaxServerWait: time.Duration(row.CappedMaxServerWaitMS) * time.Millisecond})
	if err != nil {
		return err
	}
	row.CappedPlannedMS, row.CappedWaitedMS, row.CappedCallMS = millis(planned), millis(waited), millis(took)
	r.RetryAfter = row
	return nil
}

// herd: 120 clients fail together against a server that is down; each
// retries once after base 100 ms. Their first-retry wake-up times, measured
// from the common failure as the seed did, are counted in fixed 10 ms
// windows.
func (b *runner) herd(ctx context.Context, r *Report) error {
	row := HerdRow{Clients: herdClients, BaseMS: herdBase.Milliseconds()}
	for _, jitter := range []rebound.Jitter{rebound.JitterNone, rebound.JitterFull} {
		wakes := make([]time.Duration, herdClients)
		errs := make([]error, herdClients)
		var wg sync.WaitGroup
		ready := make(chan struct{})
		for i := range herdClients {
			wg.Go(func() {
				var tally waitTally
				p := rebound.Policy{MaxAttempts: 2, BaseDelay: herdBase, MaxDelay: 5 * time.Second, Jitter: jitter,
					Rand: b.rng(1000 + uint64(i)), Observer: &tally}
				<-ready
				err := rebound.Run(ctx, p, func(ctx context.Context) error { return b.get(ctx, chaos.ModeDown) })
				wakes[i], errs[i] = tally.waited, unexpected(err)
			})
		}
		close(ready)
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		n := maxInWindow(wakes, herdWindow)
		if jitter == rebound.JitterNone {
			row.NoJitterMaxIn10ms = n
		} else {
			row.FullJitterMaxIn10ms = n
		}
	}
	row.ServerRequests = b.srv.Stats().Requests
	r.Herd = row
	return nil
}

// maxInWindow counts the times in fixed windows [k·w, (k+1)·w) and returns
// the largest count.
func maxInWindow(times []time.Duration, w time.Duration) int {
	counts := map[time.Duration]int{}
	best := 0
	for _, t := range times {
		k := t / w
		counts[k]++
		best = max(best, counts[k])
	}
	return best
}

func (b *runner) budget(ctx context.Context, r *Report) error {
	p := rebound.Policy{MaxAttempts: 20, BaseDelay: 200 * time.Millisecond, MaxDelay: 5 * time.Second,
		WaitBudget: 1500 * time.Millisecond, Rand: b.rng(2)}
	var tally waitTally
	p.Observer = &tally
	start := time.Now()
	err := rebound.Run(ctx, p, func(ctx context.Context) error { return b.get(ctx, chaos.ModeDown) })
	took := time.Since(start)
	var gu *rebound.GiveUpError
	if !errors.As(err, &gu) {
		return fmt.Errorf("want a give-up, got %v", err)
	}
	r.Budget = BudgetRow{
		MaxAttempts: p.MaxAttempts, WaitBudgetMS: p.WaitBudget.Milliseconds(), GaveUpAfterMS: millis(took),
		WaitedMS: millis(tally.waited), ServerRequests: b.srv.Stats().Requests, StopReason: gu.Reason.String(),
	}
	return nil
}

func (b *runner) idempotency(ctx context.Context, r *Report) error {
	p := rebound.Policy{MaxAttempts: 4, BaseDelay: 20 * time.Millisecond, Rand: b.rng(3)}
	row := IdempotencyRow{MaxAttempts: p.MaxAttempts}
	for _, side := range []bool{true, false} {
		b.srv.Reset()
		callCtx := ctx
		if side {
			callCtx = rebound.WithSideEffects(ctx)
		}
		err := rebound.Run(callCtx, p, func(ctx context.Context) error { return b.get(ctx, chaos.ModeDown) })
		if err == nil {
			return errors.New("a call to a server that is down succeeded")
		}
		if side {
			row.NonIdempotentRequests = b.srv.Stats().Requests
		} else {
			row.IdempotentRequests = b.srv.Stats().Requests
		}
	}
	r.Idempotency = row
	return nil
}

// millis converts d to milliseconds, to the microsecond.
func millis(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}

func pct(n, of int) float64 { return 100 * float64(n) / float64(of) }

// WriteTable writes r beside the 429 article's figures.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "rebound bench, seed %d: the 429 article's experiments against the chaos server over loopback HTTP\n\n", r.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "experiment\tarticle's figure\trebound")
	fmt.Fprintln(tw, "----------\t-------------\t-------")
	nr, fj := r.NoRetry, r.FullJitter
	fmt.Fprintf(tw, "no retry, %.0f%% failures\t122/200 (61.0%%)\t%d/%d (%.1f%%), %d requests\n",
		100*nr.FailRate, nr.Succeeded, nr.Calls, pct(nr.Succeeded, nr.Calls), nr.ServerRequests)
	fmt.Fprintf(tw, "full jitter, %d attempts, base %d ms\t194/200 (97.0%%), 299 requests\t%d/%d (%.1f%%), %d requests (%.2f per call)\n",
		fj.MaxAttempts, fj.BaseMS, fj.Succeeded, fj.Calls, pct(fj.Succeeded, fj.Calls), fj.ServerRequests,
		float64(fj.ServerRequests)/float64(fj.Calls))
	fmt.Fprintf(tw, "  waiting, wall clock\t1872 ms, 2907 ms\t%.0f ms, %.0f ms\n", fj.TotalWaitMS, fj.WallMS)
	// The wall clock is the waits and the attempts: each a round trip.
	fmt.Fprintf(tw, "  of which the attempts' own time\t1035 ms\t%.0f ms for %d requests\n", fj.WallMS-fj.TotalWaitMS, fj.ServerRequests)
	by := fj.SuccessByAttempt
	fmt.Fprintf(tw, "  success by attempt\t138 · 37 · 13 · 6\t%d · %d · %d · %d\n", by[0], by[1], by[2], by[3])
	fmt.Fprintf(tw, "server always 400\t1 request, 1 ms\t%d request, %.2f ms\n", r.Always400.ServerRequests, r.Always400.WallMS)
	ra := r.RetryAfter
	fmt.Fprintf(tw, "429 + Retry-After: %d\twaited 1000 ms, call 1008 ms\twaited %.0f ms, call %.0f ms\n", ra.HintS, ra.WaitedMS, ra.CallMS)
	fmt.Fprintf(tw, "  clamped to %d ms\twaited 300 ms\twaited %.0f ms, call %.0f ms\n", ra.CappedMaxServerWaitMS, ra.CappedWaitedMS, ra.CappedCallMS)
	h := r.Herd
	fmt.Fprintf(tw, "%d clients, first retry, base %d ms\t\t\n", h.Clients, h.BaseMS)
	fmt.Fprintf(tw, "  most waking in one 10 ms window, no jitter\t120/120\t%d/%d\n", h.NoJitterMaxIn10ms, h.Clients)
	fmt.Fprintf(tw, "  most waking in one 10 ms window, full jitter\t15/120\t%d/%d\n", h.FullJitterMaxIn10ms, h.Clients)
	bu := r.Budget
	fmt.Fprintf(tw, "always 503, %d attempts, wait budget %d ms\tgave up at 1526 ms\tgave up at %.0f ms (%s), %d requests, %.0f ms waited\n",
		bu.MaxAttempts, bu.WaitBudgetMS, bu.GaveUpAfterMS, bu.StopReason, bu.ServerRequests, bu.WaitedMS)
	if bu.StopReason == rebound.StopWaitBudget.String() {
		// The budget bounds the waits, and a wait is drawn whole: one
		// that would not fit is never begun, so the call ends short of it.
		fmt.Fprintf(tw, "  why before the budget\tran past it\tthe next wait would not fit in the %.0f ms left of the %d ms\n",
			float64(bu.WaitBudgetMS)-bu.WaitedMS, bu.WaitBudgetMS)
	}
	id := r.Idempotency
	fmt.Fprintf(tw, "always 503, side effects vs idempotent\t1 vs 4 requests\t%d vs %d requests\n", id.NonIdempotentRequests, id.IdempotentRequests)
	tw.Flush()
}
