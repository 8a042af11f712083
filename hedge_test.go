package rebound_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// slowThenFast is an attempt function whose first call takes first and
// every later one later, each ending early if its context does; it notes
// when each call started, and the cause that ended each cancelled one.
type slowThenFast struct {
	first, later time.Duration
	start        time.Time

	mu      sync.Mutex // guards started, causes and running
	started []time.Duration
	causes  []error
	running int
}

func (s *slowThenFast) call(ctx context.Context) (string, error) {
	s.mu.Lock()
	n := len(s.started)
	s.started = append(s.started, time.Since(s.start))
	s.running++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}()
	d := s.later
	if n == 0 {
		d = s.first
	}
	select {
	case <-time.After(d):
		return fmt.Sprintf("answer %d", n+1), nil
	case <-ctx.Done():
		s.mu.Lock()
		s.causes = append(s.causes, context.Cause(ctx))
		s.mu.Unlock()
		return "", ctx.Err()
	}
}

// hedgeEvents counts a call's hedges.
type hedgeEvents struct{ hedges, attempts atomic.Int32 }

func (h *hedgeEvents) Observe(e rebound.Event) {
	switch e.Type {
	case rebound.EventHedge:
		h.hedges.Add(1)
	case rebound.EventAttempt:
		h.attempts.Add(1)
	}
}

// TestHedgeDo: a slow attempt gets a hedge exactly at the delay; the first
// answer wins, and the loser is cancelled with ErrHedgeLost and has ended
// by the time Do returns.
func TestHedgeDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &slowThenFast{first: 10 * time.Second, later: 200 * time.Millisecond, start: time.Now()}
		var events hedgeEvents
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Observer: &events}
		out, err := rebound.Do(t.Context(), p, s.call)
		took := time.Since(s.start)
		if err != nil || out != "answer 2" {
			t.Fatalf("Do = %q, %v; want the hedge's answer", out, err)
		}
		if len(s.started) != 2 || s.started[1] != time.Second {
			t.Errorf("attempts started at %v; want 0s and 1s", s.started)
		}
		if took != 1200*time.Millisecond {
			t.Errorf("Do took %v; want 1.2s (the hedge's delay and its answer)", took)
		}
		if s.running != 0 || len(s.causes) != 1 || !errors.Is(s.causes[0], rebound.ErrHedgeLost) {
			t.Errorf("%d attempts still running, causes %v; want the loser ended with ErrHedgeLost", s.running, s.causes)
		}
		if events.hedges.Load() != 1 || events.attempts.Load() != 1 {
			t.Errorf("%d hedge and %d attempt events; want 1 and 1", events.hedges.Load(), events.attempts.Load())
		}
	})
}

// TestHedgeNotMade: no hedge for an attempt that answers within the delay,
// for a call with side effects, or when the retry budget is spent.
func TestHedgeNotMade(t *testing.T) {
	for _, c := range []struct {
		name   string
		first  time.Duration
		ctx    func(context.Context) context.Context
		budget rebound.Budget
	}{
		{"fast enough", 999 * time.Millisecond, nil, nil},
		{"side effects", 5 * time.Second, rebound.WithSideEffects, nil},
		{"budget spent", 5 * time.Second, nil, &rebound.RetryBudget{MinPerSecond: -1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &slowThenFast{first: c.first, later: time.Millisecond, start: time.Now()}
				ctx := t.Context()
				if c.ctx != nil {
					ctx = c.ctx(ctx)
				}
				var events hedgeEvents
				p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Budget: c.budget, Observer: &events}
				out, err := rebound.Do(ctx, p, s.call)
				if err != nil || out != "answer 1" || len(s.started) != 1 || events.hedges.Load() != 0 {
					t.Errorf("Do = %q, %v after %d attempts, %d hedges; want the first's answer alone", out, err, len(s.started), events.hedges.Load())
				}
				if took := time.Since(s.start); took != c.first {
					t.Errorf("took %v; want %v", took, c.first)
				}
			})
		})
	}
}

// TestHedgeDelayLearns: the delay is After until 16 first-token times are
// known, then their 90th percentile, and it follows the target.
func TestHedgeDelayLearns(t *testing.T) {
	h := &rebound.Hedge{After: 3 * time.Second}
	for i := 1; i <= 15; i++ {
		h.Observe("a", time.Duration(i)*time.Millisecond)
	}
	if d := h.Delay("a"); d != 3*time.Second {
		t.Errorf("after 15 samples the delay is %v; want After", d)
	}
	for i := 16; i <= 100; i++ {
		h.Observe("a", time.Duration(i)*time.Millisecond)
	}
	if d := h.Delay("a"); d != 90*time.Millisecond {
		t.Errorf("delay of 1..100 ms is %v; want the 90th percentile, 90ms", d)
	}
	if d := h.Delay("b"); d != 3*time.Second {
		t.Errorf("another target's delay is %v; want After", d)
	}
	fixed := &rebound.Hedge{After: time.Second, Percentile: -1}
	for range 100 {
		fixed.Observe("a", time.Millisecond)
	}
	if d := fixed.Delay("a"); d != time.Second {
		t.Errorf("a fixed hedge's delay is %v; want After", d)
	}
	if d := (&rebound.Hedge{Percentile: 1.5}).Delay("a"); d != 0 {
		t.Errorf("an invalid percentile hedges after %v; want never", d)
	}
	if err := (rebound.Policy{Hedge: &rebound.Hedge{Percentile: 1.5}}).Validate(); err == nil || !strings.Contains(err.Error(), "hedge.percentile") {
		t.Errorf("Validate = %v; want the percentile named", err)
	}
}

// TestHedgeDoFailures: a first attempt that fails while its hedge runs
// leaves the race to the hedge; when both fail, the call retries as after
// any failure.
func TestHedgeDoFailures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		fn := func(ctx context.Context) (string, error) {
			switch calls.Add(1) {
			case 1: // slow, then fails while the hedge runs
				time.Sleep(1500 * time.Millisecond)
				return "", errors.New("upstream 503")
			case 2: // the hedge fails later
				time.Sleep(time.Second)
				return "", errors.New("upstream 502")
			}
			return "third", nil
		}
		start := time.Now()
		var events hedgeEvents
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, BaseDelay: rebound.NoDelay, Observer: &events}
		out, err := rebound.Do(t.Context(), p, fn)
		if err != nil || out != "third" || calls.Load() != 3 {
			t.Fatalf("Do = %q, %v after %d calls; want the retry's answer", out, err, calls.Load())
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("took %v; want 2s: the retry follows the hedge's failure", took)
		}
	})
}

// TestHedgePanic: a panic in the hedge reaches the caller with its own
// value, once the first attempt has ended too.
func TestHedgePanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		var firstEnded atomic.Bool
		fn := func(ctx context.Context) (string, error) {
			if calls.Add(1) == 2 {
				panic("hedge broke")
			}
			<-ctx.Done()
			firstEnded.Store(true)
			return "", ctx.Err()
		}
		defer func() {
			if r := recover(); r != "hedge broke" || !firstEnded.Load() {
				t.Errorf("recovered %v, first ended %v; want the hedge's panic after the first ended", r, firstEnded.Load())
			}
		}()
		rebound.Do(t.Context(), rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}, fn)
	})
}

// hedgedUpstream answers its first request with an event stream that
// sends a preamble and then nothing until its request ends, and later
// ones with a whole answer; it notes each request's body and how each
// slow stream ended.
type hedgedUpstream struct {
	mu     sync.Mutex // guards bodies, closed and causes
	bodies []string
	closed int
	causes []error
}

func (u *hedgedUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	b, _ := io.ReadAll(req.Body)
	u.mu.Lock()
	n := len(u.bodies)
	u.bodies = append(u.bodies, string(b))
	u.mu.Unlock()
	h := http.Header{"Content-Type": {"text/event-stream"}}
	if n > 0 {
		answer := `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" +
			`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(strings.NewReader(answer)), Request: req}, nil
	}
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte(`data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n"))
		<-req.Context().Done()
		u.mu.Lock()
		u.causes = append(u.causes, context.Cause(req.Context()))
		u.mu.Unlock()
		pw.CloseWithError(req.Context().Err())
	}()
	return &http.Response{StatusCode: 200, Header: h, Body: &noteClose{ReadCloser: pr, u: u}, Request: req}, nil
}

type noteClose struct {
	io.ReadCloser
	u *hedgedUpstream
}

func (c *noteClose) Close() error {
	c.u.mu.Lock()
	c.u.closed++
	c.u.mu.Unlock()
	return c.ReadCloser.Close()
}

// TestHedgeTransport: a stream slow to its first content is hedged; the
// caller reads the hedge's stream, the slow one is cancelled and closed,
// and both requests carried the whole body.
func TestHedgeTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &hedgedUpstream{}
		var events hedgeEvents
		tr := &rebound.Transport{Base: up, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: 2 * time.Second, Percentile: -1}, Observer: &events}}
		const body = `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}]}`
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://provider.test/v1/chat/completions", strings.NewReader(body))
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.Contains(string(got), `"content":"hi"`) || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
			t.Fatalf("read %q, %v; want the hedge's whole answer", got, err)
		}
		if took := time.Since(start); took != 2*time.Second {
			t.Errorf("answered after %v; want the hedge's 2s", took)
		}
		synctest.Wait()
		up.mu.Lock()
		defer up.mu.Unlock()
		if len(up.bodies) != 2 || up.bodies[0] != body || up.bodies[1] != body {
			t.Errorf("upstream got bodies %q; want the request's twice", up.bodies)
		}
		if up.closed != 1 || len(up.causes) != 1 || !errors.Is(up.causes[0], rebound.ErrHedgeLost) {
			t.Errorf("slow stream closed %d times, ended by %v; want closed once, cancelled with ErrHedgeLost", up.closed, up.causes)
		}
		if events.hedges.Load() != 1 {
			t.Errorf("%d hedge events; want 1", events.hedges.Load())
		}
	})
}

// TestHedgeStream: a stream with nothing past its preamble at the delay is
// hedged; the caller reads the hedge's events, the slow stream's preamble
// never, and the slow stream is cancelled and has ended when the loop does.
func TestHedgeStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			opened atomic.Int32
			ended  atomic.Int32
			cause  error
		)
		open := func(ctx context.Context) iter.Seq2[string, error] {
			n := opened.Add(1)
			return func(yield func(string, error) bool) {
				defer ended.Add(1)
				if !yield(fmt.Sprintf("preamble %d", n), nil) {
					return
				}
				if n == 1 {
					<-ctx.Done()
					cause = context.Cause(ctx)
					yield("", ctx.Err())
					return
				}
				time.Sleep(300 * time.Millisecond)
				for _, ev := range []string{"hello", "world", "end"} {
					if !yield(ev, nil) {
						return
					}
				}
			}
		}
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}}
		o := rebound.StreamOptions[string]{Preamble: func(ev string) bool { return strings.HasPrefix(ev, "preamble") },
			Done: func(ev string) bool { return ev == "end" }}
		start := time.Now()
		var got []string
		for ev, err := range rebound.StreamWith(t.Context(), p, open, o) {
			if err != nil {
				t.Fatalf("stream failed: %v", err)
			}
			got = append(got, ev)
		}
		if want := "preamble 2,hello,world,end"; strings.Join(got, ",") != want {
			t.Errorf("read %q; want %q", got, want)
		}
		if took := time.Since(start); took != 1300*time.Millisecond {
			t.Errorf("took %v; want 1.3s", took)
		}
		if opened.Load() != 2 || ended.Load() != 2 || !errors.Is(cause, rebound.ErrHedgeLost) {
			t.Errorf("%d opened, %d ended, slow one ended by %v; want 2, 2, ErrHedgeLost", opened.Load(), ended.Load(), cause)
		}
	})
}

// TestHedgeTransportLoopback: over real connections, the hedge's stream is
// read whole, and the slow request is cancelled on the server's side too.
func TestHedgeTransportLoopback(t *testing.T) {
	var (
		n         atomic.Int32
		abandoned = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		if n.Add(1) == 1 {
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\"}}]}\n\n")
			w.(http.Flusher).Flush()
			<-r.Context().Done() // never a token; the client goes away
			close(abandoned)
			return
		}
		io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &rebound.Transport{Base: base,
		Policy: rebound.Policy{Hedge: &rebound.Hedge{After: 50 * time.Millisecond, Percentile: -1}}}}
	resp, err := client.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !strings.HasSuffix(string(got), "data: [DONE]\n\n") {
		t.Fatalf("read %q, %v; want the hedge's whole stream", got, err)
	}
	select {
	case <-abandoned:
	case <-time.After(10 * time.Second):
		t.Fatal("the slow request was never cancelled on the server")
	}
}

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

// A loser that panics once cancelled does not leave the winner's stream
// unclosed: its iter.Pull2 coroutine, its context and its Stall timer end
// with the call.
func TestHedgedStreamLoserPanicStillStopsTheWinner(t *testing.T) {
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

// The same in Transport: when the loser's Base panics, the winner's
// response body is closed and its attempt's context ended, not leaked.
func TestHedgedTransportLoserPanicClosesTheWinnersBody(t *testing.T) {
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

// An Observer that panics on EventHedge still settles both permits (the
// attempt's, handed over to the race, and the hedge's), so that a
// half-open breaker's probe ends, and no attempt outlives Do.
func TestHedgeObserverPanicSettlesEveryPermit(t *testing.T) {
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

// A Classifier that panics on the losing racer's failure (judged inside
// the race's clean-up) still settles every permit of the race.
func TestHedgeClassifierPanicSettlesEveryPermit(t *testing.T) {
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

// A 101 Switching Protocols response's body stays an io.ReadWriteCloser,
// with a Hedge or without, so that a WebSocket dial (OpenAI's Realtime
// API, say) works through the Transport.
func TestHedgedUpgradeBodyStaysWritable(t *testing.T) {
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

// A hedge whose request body cannot be got again (GetBody fails) was never
// sent: the breaker does not hear it as a failure of the provider, as the
// engine's own unsent attempt is OutcomeIgnored.
func TestHedgeNeverSentIsNoFailure(t *testing.T) {
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

// A panic in the caller's loop body of a hedged stream is the caller's:
// the winner's permit goes back as OutcomeIgnored.
func TestHedgedStreamCallerPanicSaysNothingOfTheProvider(t *testing.T) {
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

// Goexit in the hedge reaches the caller; every permit settles.
func TestHedgeGoexitReachesTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		fn := func(ctx context.Context) (string, error) {
			if calls.Add(1) == 2 {
				runtime.Goexit()
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

// The caller cancels mid-race: no failure is reported to the breaker.
func TestHedgeCallerCancelIsNoFailure(t *testing.T) {
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

// A hedge refused by the breaker refunds its budget withdrawal.
func TestHedgeRefusedByTheBreakerRefundsTheBudget(t *testing.T) {
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

// A POST without GetBody is buffered and both racers get it whole; a body
// over MaxBufferedBody is never hedged.
func TestHedgedRequestBodiesGoWhole(t *testing.T) {
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

// Both racers fail with a 503: the later response is given back,
// readable, and the earlier one is closed.
func TestHedgeBothFailedGivesBackTheLaterResponse(t *testing.T) {
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

// A hedged Transport winner's body closed early ends its attempt's
// context.
func TestHedgedWinnerClosedEarlyEndsItsContext(t *testing.T) {
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

// A Hedge shared by many goroutines and targets, fed absurd values, never
// gives a negative delay.
func TestHedgeSharedUnderAbsurdValues(t *testing.T) {
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

// AttemptTimeout ends the first racer while its hedge wins: the first is
// a failure, the hedge a success, each settled once.
func TestHedgeAttemptTimeoutEndsTheSlowRacer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		fn := func(ctx context.Context) (string, error) {
			d := 10 * time.Second
			if calls.Add(1) == 2 {
				d = 1500 * time.Millisecond
			}
			select {
			case <-time.After(d):
				return "ok", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}
		b := &countingBreaker{}
		p := rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b, AttemptTimeout: 2 * time.Second}
		out, err := rebound.Do(t.Context(), p, fn)
		if err != nil || out != "ok" {
			t.Fatal(out, err)
		}
		if got := b.got(); len(got) != 2 || got[0] != rebound.OutcomeFailure || got[1] != rebound.OutcomeSuccess {
			t.Errorf("outcomes %v; want failure (timed out) then success", got)
		}
	})
}

// One racer's stream fails with an in-band error before content; the
// other's content wins, and every permit settles once.
func TestHedgeRacerWithAnInBandErrorLosesToContent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int32
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			h := http.Header{"Content-Type": {"text/event-stream"}}
			if calls.Add(1) == 2 {
				return &http.Response{StatusCode: 200, Header: h, Request: req,
					Body: io.NopCloser(strings.NewReader("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"))}, nil
			}
			time.Sleep(3 * time.Second)
			return &http.Response{StatusCode: 200, Header: h, Request: req, Body: io.NopCloser(strings.NewReader(
				`data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}` + "\n\n" +
					`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" + "data: [DONE]\n\n"))}, nil
		})
		b := &countingBreaker{}
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: time.Second, Percentile: -1}, Breaker: b}}
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://p.test/v1/chat/completions", strings.NewReader("{}"))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || !strings.Contains(string(got), `"hi"`) {
			t.Errorf("read %q %v", got, err)
		}
		if never, twice := b.unsettled(); never != 0 || twice != 0 {
			t.Errorf("unsettled %d twice %d", never, twice)
		}
	})
}

// A real server and http.Transport: the slow racer is cut, the
// connections go; goleak checks the rest at the end.
func TestHedgeOverARealServerLeaksNothing(t *testing.T) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if n.Add(1) == 1 {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}`+"\n\n"+`data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	c := &http.Client{Transport: &rebound.Transport{Base: base, Policy: rebound.Policy{Hedge: &rebound.Hedge{After: 50 * time.Millisecond, Percentile: -1}}}}
	resp, err := c.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(got), "[DONE]") || n.Load() != 2 {
		t.Errorf("got %q after %d requests", got, n.Load())
	}
}
