package rebound_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/http/httptest"
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
