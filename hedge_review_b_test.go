package rebound_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// H1: a panic in the caller's loop body of a hedged stream is the
// caller's: the winner's permit goes back as OutcomeIgnored.
func TestReviewHeldStreamCallerPanicIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opened atomic.Int32
		open := func(ctx context.Context) iter.Seq2[string, error] {
			n := opened.Add(1)
			return func(yield func(string, error) bool) {
				if n == 1 {
					<-ctx.Done()
					yield("", ctx.Err())
					return
				}
				yield("hi", nil)
				yield("there", nil)
			}
		}
		b := &countingBreaker{}
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b}
		func() {
			defer func() { recover() }()
			for range rebound.StreamWith(t.Context(), p, open, rebound.StreamOptions[string]{}) {
				panic("caller's bug")
			}
		}()
		never, twice := b.unsettled()
		if never != 0 || twice != 0 {
			t.Errorf("unsettled %d, twice %d", never, twice)
		}
		for _, o := range b.got() {
			if o == rebound.OutcomeFailure {
				t.Errorf("outcomes %v; want no failure", b.got())
			}
		}
	})
}

// H2: Goexit in the hedge reaches the caller; every permit settles.
func TestReviewHeldGoexit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		fn := func(ctx context.Context) (string, error) {
			if calls.Add(1) == 2 {
				runtime_Goexit()
			}
			<-ctx.Done()
			return "", ctx.Err()
		}
		b := &countingBreaker{}
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b}
		done := make(chan bool)
		go func() {
			returned := false
			defer func() { done <- returned }()
			rebound.Do(t.Context(), p, fn)
			returned = true
		}()
		if <-done {
			t.Errorf("Do returned; want Goexit")
		}
		if never, twice := b.unsettled(); never != 0 || twice != 0 {
			t.Errorf("unsettled %d, twice %d", never, twice)
		}
	})
}

// H3: the caller cancels mid-race: no failure is reported to the breaker.
func TestReviewHeldCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		fn := func(ctx context.Context) (string, error) {
			<-ctx.Done()
			return "", ctx.Err()
		}
		b := &countingBreaker{}
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b}
		time.AfterFunc(1500*time.Millisecond, cancel)
		_, err := rebound.Do(ctx, p, fn)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err %v", err)
		}
		got := b.got()
		if len(got) != 2 || got[0] != rebound.OutcomeIgnored || got[1] != rebound.OutcomeIgnored {
			t.Errorf("outcomes %v; want two ignored", got)
		}
	})
}

// refuseSecond allows the first permit only.
type refuseSecond struct{ countingBreaker }

func (r *refuseSecond) Allow() (rebound.Permit, error) {
	r.mu.Lock()
	n := r.next
	r.mu.Unlock()
	if n >= 1 {
		return 0, errors.New("half-open: probe in flight")
	}
	return r.countingBreaker.Allow()
}

// H4: a hedge refused by the breaker refunds its budget withdrawal.
func TestReviewHeldBreakerRefusedRefunds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &rebound.RetryBudget{MinPerSecond: -1, Ratio: 1}
		before := budget.Available(time.Now())
		b := &refuseSecond{}
		var events hedgeEvents
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b, Budget: budget, Observer: &events}
		out, err := rebound.Do(t.Context(), p, func(ctx context.Context) (string, error) { time.Sleep(2 * time.Second); return "ok", nil })
		if err != nil || out != "ok" {
			t.Fatal(out, err)
		}
		if after := budget.Available(time.Now()); after != before+1 || events.hedges.Load() != 0 {
			t.Errorf("budget %v -> %v (want +1, the deposit), %d hedges", before, after, events.hedges.Load())
		}
		if never, twice := b.unsettled(); never != 0 || twice != 0 {
			t.Errorf("unsettled %d, twice %d", never, twice)
		}
	})
}

// bodyNoter answers the first request slowly and later ones at once,
// noting each body it got.
type bodyNoter struct {
	mu     sync.Mutex
	bodies []string
	closed int
}

func (u *bodyNoter) RoundTrip(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	u.mu.Lock()
	n := len(u.bodies)
	u.bodies = append(u.bodies, string(b))
	u.mu.Unlock()
	if n == 0 {
		select {
		case <-time.After(10 * time.Second):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(fmt.Sprint(n))), Request: req}, nil
}

// H5: a POST without GetBody is buffered and both racers get it whole; a
// body over MaxBufferedBody is never hedged.
func TestReviewHeldBodies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &bodyNoter{}
		tr := &rebound.Transport{Base: up, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}}
		body := strings.Repeat("x", 5000)
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://p.test/", io.NopCloser(strings.NewReader(body)))
		req.GetBody = nil
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != "1" || len(up.bodies) != 2 || up.bodies[0] != body || up.bodies[1] != body {
			t.Errorf("got %q, bodies %d", got, len(up.bodies))
		}

		up2 := &bodyNoter{}
		tr2 := &rebound.Transport{Base: up2, MaxBufferedBody: 100, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}}
		req2, _ := http.NewRequestWithContext(t.Context(), "POST", "http://p.test/", io.NopCloser(strings.NewReader(body)))
		resp2, err := tr2.RoundTrip(req2)
		if err != nil {
			t.Fatal(err)
		}
		resp2.Body.Close()
		if len(up2.bodies) != 1 || up2.bodies[0] != body {
			t.Errorf("large body: %d requests", len(up2.bodies))
		}
	})
}

// H6: both racers fail with a 503: the later response is given back,
// readable, and the earlier one is closed.
func TestReviewHeldBothFailGiveBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		var closedN atomic.Int32
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			n := calls.Add(1)
			d := 1500 * time.Millisecond
			if n == 2 {
				d = time.Second
			}
			time.Sleep(d)
			return &http.Response{StatusCode: 503, Header: http.Header{"Content-Type": {"application/json"}},
				Body: countClose{Reader: strings.NewReader(fmt.Sprintf(`{"error":{"message":"busy %d"}}`, n)), n: &closedN}, Request: req}, nil
		})
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{MaxAttempts: 1, Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}}
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://p.test/", bytes.NewReader([]byte("{}")))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(got), "busy 2") || closedN.Load() != 2 {
			t.Errorf("status %d body %q closed %d", resp.StatusCode, got, closedN.Load())
		}
	})
}

type countClose struct {
	io.Reader
	n *atomic.Int32
}

func (c countClose) Close() error { c.n.Add(1); return nil }

// H7: a hedged Transport winner's body closed early ends its attempt's
// context.
func TestReviewHeldEarlyClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ctxs []context.Context
		var mu sync.Mutex
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			ctxs = append(ctxs, req.Context())
			n := len(ctxs)
			mu.Unlock()
			if n == 1 {
				<-req.Context().Done()
				return nil, req.Context().Err()
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(strings.Repeat("x", 1000))), Request: req}, nil
		})
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}}
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://p.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if ctxs[1].Err() != nil {
			t.Errorf("winner ctx ended before close")
		}
		resp.Body.Read(make([]byte, 10))
		resp.Body.Close()
		if ctxs[1].Err() == nil || ctxs[0].Err() == nil {
			t.Errorf("contexts not ended: %v %v", ctxs[0].Err(), ctxs[1].Err())
		}
	})
}

// H8: a Hedge shared by many goroutines and targets, absurd values.
func TestReviewHeldHedgeConcurrent(t *testing.T) {
	h := &rebound.Hedge{After: time.Second}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 3000 {
				k := fmt.Sprint((g*3000 + i) % 2000)
				h.Observe(k, time.Duration(i)*time.Millisecond)
				h.Observe(k, -time.Second)
				h.Observe(k, time.Duration(1<<63-1))
				_ = h.Delay(k)
			}
		})
	}
	wg.Wait()
	for _, q := range []float64{1e-300, -1, 1, 0.5} {
		h2 := &rebound.Hedge{Percentile: q, After: time.Duration(1<<63 - 1)}
		for i := range 20 {
			h2.Observe("a", time.Duration(i))
		}
		if d := h2.Delay("a"); d < 0 {
			t.Errorf("q %v: delay %v", q, d)
		}
	}
}

func runtime_Goexit() { runtime.Goexit() }
