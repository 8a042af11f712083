package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// mode is the kind of chat completion a step asks for.
type mode string

const (
	plain    mode = "plain"
	streamed mode = "streamed"
)

// body is the request a step sends in mode m: a short chat completion,
// streamed or not.
func (m mode) body() []byte {
	if m == streamed {
		return []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}],"stream":true}`)
	}
	return []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Say hello."}]}`)
}

// requestTimeout bounds one request, so that a stalled gateway ends its step
// with errors rather than holding it open.
const requestTimeout = 5 * time.Second

// maxConns bounds the connections a step opens to its target: past it,
// requests wait for a connection (and their latency says so) rather than
// exhaust the harness's file descriptors.
const maxConns = 2000

// settle is the pause after each step.
const settle = 500 * time.Millisecond

// quickAnswer and drainLimit bound drain: a target has drained its backlog
// when it answers one request within quickAnswer; past drainLimit the
// harness goes on regardless.
const (
	quickAnswer = 50 * time.Millisecond
	drainLimit  = 60 * time.Second
)

// drain calls t, one request at a time, until one is answered within
// quickAnswer, and returns how long that took: about nothing for a target
// that kept up.
func drain(ctx context.Context, client *http.Client, t target, header http.Header, m mode) time.Duration {
	start := time.Now()
	for time.Since(start) < drainLimit && ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(m.body()))
		if err != nil {
			break
		}
		req.Header = header.Clone()
		sent := time.Now()
		resp, err := client.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == http.StatusOK && time.Since(sent) < quickAnswer {
				break
			}
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
	return time.Since(start)
}

// shortfall is how far the requests a step sent may fall below rate ×
// duration before the step counts as not sustained: past it the load
// generator, not the target, set the pace.
const shortfall = 0.95

// point is what one step, a fixed rate for a fixed time against one target,
// measured.
type point struct {
	Target   string        `json:"target"`
	Mode     mode          `json:"mode"`
	Rate     int           `json:"rate"`
	Duration time.Duration `json:"duration_ns"`
	Requests int           `json:"requests"`
	Errors   int           `json:"errors"`
	P50      time.Duration `json:"p50_ns"`
	P99      time.Duration `json:"p99_ns"`
	// FirstError is the first failed request's error, to say why a step
	// failed.
	FirstError string `json:"first_error,omitempty"`
	// Drained is how long the target took after the step to answer one
	// request quickly again (see drain); in turns, after each turn, summed.
	Drained time.Duration `json:"drained_ns"`
}

// sustained reports whether the target kept up with the step's rate: every
// request sent and answered without error, and p99 under limit.
func (p point) sustained(limit time.Duration) bool {
	wanted := float64(p.Rate) * p.Duration.Seconds()
	return p.Errors == 0 && p.Requests > 0 && float64(p.Requests) >= shortfall*wanted && p.P99 < limit
}

// step calls t at rate requests a second for d with vegeta and measures each
// request's latency, to the end of its answer's body.
func step(ctx context.Context, t target, m mode, rate int, d time.Duration) point {
	c := newCaller(t, m, rate)
	defer c.close()
	c.attack(ctx, d)
	c.drain(ctx)
	p := c.finish()
	pause(ctx)
	return p
}

// interleaved measures every target of targets at rate for d each, as step
// does, in turns of slice: the first target for a slice, then the next,
// round and round until each has had d. Whatever else the machine does
// meanwhile (its neighbours on a shared host, a collection in the load
// generator) falls on every target alike, not on whichever step it
// happened to meet. The points are in the order of targets.
func interleaved(ctx context.Context, targets []target, m mode, rate int, d, slice time.Duration) []point {
	callers := make([]*caller, len(targets))
	for i, t := range targets {
		callers[i] = newCaller(t, m, rate)
		defer callers[i].close()
	}
	for done := time.Duration(0); done < d && ctx.Err() == nil; done += slice {
		for _, c := range callers {
			c.attack(ctx, min(slice, d-done))
			c.drain(ctx)
		}
	}
	points := make([]point, len(callers))
	for i, c := range callers {
		points[i] = c.finish()
	}
	pause(ctx)
	return points
}

// caller calls one target in one mode at one rate, over its own
// connections, and gathers what its attacks measured.
type caller struct {
	t         target
	m         mode
	rate      int
	header    http.Header
	targeter  vegeta.Targeter
	transport *http.Transport
	client    *http.Client
	latencies []time.Duration
	p         point
}

// newCaller returns a caller of t in mode m at rate, with no connection
// open yet.
func newCaller(t target, m mode, rate int) *caller {
	header := http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer sk-bench"}}
	for k, v := range t.header {
		header[k] = v
	}
	// The caller's own transport, its idle connections closed at the end,
	// so that no step leaves connections (and file descriptors) to the
	// next one.
	transport := &http.Transport{MaxIdleConnsPerHost: maxConns, MaxConnsPerHost: maxConns}
	return &caller{t: t, m: m, rate: rate, header: header, transport: transport,
		targeter: vegeta.NewStaticTargeter(vegeta.Target{Method: http.MethodPost, URL: t.url, Body: m.body(), Header: header}),
		client: &http.Client{Transport: transport, Timeout: requestTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		p: point{Target: t.name, Mode: m, Rate: rate}}
}

// attack calls the target at the caller's rate for d, with an attacker of
// its own (one stops for good at its end) over the caller's connections.
func (c *caller) attack(ctx context.Context, d time.Duration) {
	attacker := vegeta.NewAttacker(vegeta.Client(c.client))
	stopped := context.AfterFunc(ctx, func() { attacker.Stop() })
	defer stopped()
	c.p.Duration += d
	c.latencies = slices.Grow(c.latencies, int(float64(c.rate)*d.Seconds())+1)
	for res := range attacker.Attack(c.targeter, vegeta.Rate{Freq: c.rate, Per: time.Second}, d, c.t.name) {
		c.p.Requests++
		c.latencies = append(c.latencies, res.Latency)
		if res.Error != "" || res.Code != http.StatusOK {
			if c.p.Errors == 0 {
				c.p.FirstError = cmp.Or(res.Error, fmt.Sprintf("status %d", res.Code))
			}
			c.p.Errors++
		}
	}
}

// drain waits for the target to have drained its backlog (see drain): a
// target that fell behind is still working through requests its callers
// gave up on, on the cores the next target is measured with. One that has
// used up drainLimit in earlier turns is not waited for again: turns must
// not multiply the bound on a point's drain.
func (c *caller) drain(ctx context.Context) {
	if c.p.Drained < drainLimit {
		c.p.Drained += drain(ctx, c.client, c.t, c.header, c.m)
	}
}

// finish returns the caller's point: what its attacks measured.
func (c *caller) finish() point {
	slices.Sort(c.latencies)
	c.p.P50 = percentile(c.latencies, 0.50)
	c.p.P99 = percentile(c.latencies, 0.99)
	return c.p
}

func (c *caller) close() { c.transport.CloseIdleConnections() }

// pause lets the targets finish their own after-work (a collection, a
// flush of logs) before the next step, so that no step's load spills into
// the next one's figures.
func pause(ctx context.Context) {
	select {
	case <-time.After(settle):
	case <-ctx.Done():
	}
}

// percentile is the nearest-rank q-quantile of sorted: the smallest value
// that at least q of the values do not exceed. It is 0 for no values.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// median is the middle of values, the mean of the two middle ones for an
// even count, and 0 for none. It does not reorder values.
func median(values []time.Duration) time.Duration {
	if len(values) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(values))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// searchMax finds the highest rate up to ceiling at which holds is true,
// assuming it holds below any rate at which it holds: it doubles from
// first until holds fails, then bisects until the rate is known within
// a tenth (or within minStep requests a second). It returns 0 if holds fails
// at every rate it tries.
func searchMax(first, ceiling int, holds func(rate int) bool) int {
	const minStep = 50
	passed, failed := 0, 0
	for rate := min(first, ceiling); failed == 0; rate = min(2*rate, ceiling) {
		if !holds(rate) {
			failed = rate
			break
		}
		passed = rate
		if rate == ceiling {
			return ceiling
		}
	}
	for failed-passed > max(passed/10, minStep) {
		mid := (passed + failed) / 2
		if holds(mid) {
			passed = mid
		} else {
			failed = mid
		}
	}
	return passed
}
