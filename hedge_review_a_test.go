package rebound_test

import (
	"context"
	"errors"
	"io"
	"iter"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// countingBreaker allows everything and counts permits given and handed
// back, by outcome.
type countingBreaker struct {
	mu       sync.Mutex
	next     rebound.Permit
	out      map[rebound.Permit]int // permit -> times handed back
	outcomes []rebound.Outcome
}

func (b *countingBreaker) Allow() (rebound.Permit, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	if b.out == nil {
		b.out = map[rebound.Permit]int{}
	}
	b.out[b.next] = 0
	return b.next, nil
}

func (b *countingBreaker) Done(p rebound.Permit, o rebound.Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.out[p]++
	b.outcomes = append(b.outcomes, o)
}

// unsettled returns how many permits were never handed back, and how many
// more than once.
func (b *countingBreaker) unsettled() (never, twice int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, n := range b.out {
		switch {
		case n == 0:
			never++
		case n > 1:
			twice++
		}
	}
	return never, twice
}

func (b *countingBreaker) got() []rebound.Outcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]rebound.Outcome(nil), b.outcomes...)
}

// R1: a loser that panics once cancelled leaves the winner's stream
// unclosed: its iter.Pull2 coroutine, its context and its Stall timer
// outlive the call.
func TestReviewHedgeStreamLoserPanicLeaksWinner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var opened, ended atomic.Int32
		open := func(ctx context.Context) iter.Seq2[string, error] {
			n := opened.Add(1)
			return func(yield func(string, error) bool) {
				defer ended.Add(1)
				if n == 1 {
					<-ctx.Done()
					panic("loser broke on cancel")
				}
				for _, ev := range []string{"hello", "world"} {
					if !yield(ev, nil) {
						return
					}
				}
				<-ctx.Done() // a live connection: ends when its attempt does
			}
		}
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}
		func() {
			defer func() { recover() }()
			for range rebound.StreamWith(t.Context(), p, open, rebound.StreamOptions[string]{}) {
			}
		}()
		synctest.Wait()
		if opened.Load() != 2 || ended.Load() != 2 {
			t.Errorf("%d streams opened, %d ended after the call; want 2 and 2 (the winner's stream stopped)", opened.Load(), ended.Load())
		}
	})
}

// R2: the same in Transport: the winner's response body is never closed
// (its connection and attempt context leak) when the loser's Base panics.
func TestReviewHedgeTransportLoserPanicLeaksWinnerBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		var closed atomic.Bool
		var winnerCtx context.Context
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if calls.Add(1) == 1 {
				<-req.Context().Done()
				panic("base broke on cancel")
			}
			winnerCtx = req.Context()
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
				Body: closeNote{Reader: strings.NewReader(`{}`), closed: &closed}, Request: req}, nil
		})
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}}
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://provider.test/v1/models", nil)
		func() {
			defer func() { recover() }()
			tr.RoundTrip(req)
		}()
		if !closed.Load() || winnerCtx.Err() == nil {
			t.Errorf("winner's body closed %v, its context ended %v; want both: the panic leaves no one to close it", closed.Load(), winnerCtx.Err())
		}
	})
}

type closeNote struct {
	io.Reader
	closed *atomic.Bool
}

func (c closeNote) Close() error { c.closed.Store(true); return nil }

// R3: an Observer that panics on EventHedge leaves both permits (the
// attempt's, handed over to the race, and the hedge's) unsettled: a
// half-open breaker's probe never ends. The first attempt also outlives
// Do, never cancelled.
func TestReviewHedgeObserverPanicLeaksPermits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var running atomic.Int32
		fn := func(ctx context.Context) (string, error) {
			running.Add(1)
			defer running.Add(-1)
			<-ctx.Done()
			return "", ctx.Err()
		}
		b := &countingBreaker{}
		obs := rebound.ObserverFunc(func(e rebound.Event) {
			if e.Type == rebound.EventHedge {
				panic("observer broke")
			}
		})
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b, Observer: obs}
		func() {
			defer func() { recover() }()
			rebound.Do(ctx, p, fn)
		}()
		synctest.Wait()
		never, twice := b.unsettled()
		if never != 0 || twice != 0 {
			t.Errorf("%d permits never handed back, %d twice; want 0, 0", never, twice)
		}
		if n := running.Load(); n != 0 {
			t.Errorf("%d attempts still running after Do returned; want 0", n)
		}
	})
}

// R4: a Classifier that panics on the losing racer's failure (judged
// inside the race's clean-up) leaves every permit of the race unsettled.
func TestReviewHedgeClassifierPanicLeaksPermits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		fn := func(ctx context.Context) (string, error) {
			switch calls.Add(1) {
			case 1:
				time.Sleep(1500 * time.Millisecond)
				return "", errors.New("first failed")
			default:
				time.Sleep(time.Second)
				return "", errors.New("hedge failed")
			}
		}
		b := &countingBreaker{}
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b, MaxAttempts: 1,
			Classifier: func(err error) rebound.Verdict { panic("classifier broke") }}
		func() {
			defer func() { recover() }()
			rebound.Do(t.Context(), p, fn)
		}()
		if never, twice := b.unsettled(); never != 0 || twice != 0 {
			t.Errorf("%d permits never handed back, %d twice; want 0, 0 (Do's doc: a classifier that panics is reported as a failure)", never, twice)
		}
	})
}

// R5 (regression from the iter.Pull2 rewrite): Stall no longer bounds
// open itself. An open that makes its request eagerly (as SDK streaming
// calls do) and hangs until its context ends was cut at Stall before;
// now it hangs until the caller's own deadline.
func TestReviewStreamStallCoversOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour) // a watchdog
		defer cancel()
		var opens atomic.Int32
		open := func(ctx context.Context) iter.Seq2[string, error] {
			if opens.Add(1) == 1 {
				<-ctx.Done() // waiting for headers that never come
				err := context.Cause(ctx)
				return func(yield func(string, error) bool) { yield("", err) }
			}
			return func(yield func(string, error) bool) { yield("hi", nil) }
		}
		start := time.Now()
		var got []string
		var failed error
		for ev, err := range rebound.StreamWith(ctx, rebound.Policy{BaseDelay: rebound.NoDelay}, open, rebound.StreamOptions[string]{Stall: time.Second}) {
			if err != nil {
				failed = err
				break
			}
			got = append(got, ev)
		}
		if took := time.Since(start); failed != nil || took != time.Second || strings.Join(got, ",") != "hi" {
			t.Errorf("read %q, %v after %v; want the retry's \"hi\" after the 1s stall bound", got, failed, took)
		}
	})
}

// R6: under a Hedge, a 101 Switching Protocols response's body is wrapped
// and no longer an io.ReadWriteCloser, so a WebSocket dial (OpenAI's
// Realtime API, say) through the Transport breaks; without a Hedge (and
// without AttemptTimeout) it passes as it is.
func TestReviewHedgeUpgradeBodyWritable(t *testing.T) {
	base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{"Upgrade": {"websocket"}},
			Body: rwc{}, Request: req}, nil
	})
	for _, hedge := range []*rebound.Hedge{nil, {After: time.Minute, Percentile: -1}} {
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{Hedge: hedge}}
		req, _ := http.NewRequest("GET", "http://provider.test/v1/realtime", nil)
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Connection", "Upgrade")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := resp.Body.(io.ReadWriteCloser); !ok {
			t.Errorf("hedge %v: the 101's body is a %T, not an io.ReadWriteCloser", hedge != nil, resp.Body)
		}
		resp.Body.Close()
	}
}

type rwc struct{}

func (rwc) Read(p []byte) (int, error)  { return 0, io.EOF }
func (rwc) Write(p []byte) (int, error) { return len(p), nil }
func (rwc) Close() error                { return nil }

// R8: a hedge whose request body cannot be got again (GetBody fails) was
// never sent, yet the breaker hears it as a failure of the provider and
// the budget keeps its withdrawal; the engine's own unsent attempt is
// OutcomeIgnored.
func TestReviewHedgeUnsentIsNotAFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			calls.Add(1)
			time.Sleep(2 * time.Second)
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
		})
		b := &countingBreaker{}
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b}}
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://provider.test/v1/chat/completions", strings.NewReader("{}"))
		req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("body gone") }
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, o := range b.got() {
			if o == rebound.OutcomeFailure {
				t.Errorf("breaker heard %v; want no failure: the hedge was never sent (%d sent)", b.got(), calls.Load())
				break
			}
		}
	})
}
