package ratelimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
)

type statusTransport struct {
	status atomic.Int64
	sent   atomic.Int64
}

func (s *statusTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.sent.Add(1)
	return &http.Response{StatusCode: int(s.status.Load()), Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
}

func TestTransportTellsTheAdaptiveLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &statusTransport{}
		base.status.Store(429)
		a := NewAdaptive(AdaptiveConfig{Initial: 10})
		client := &http.Client{Transport: &Transport{Base: base, Adaptive: a}}
		resp, err := client.Get("http://provider.test/")
		if err != nil {
			t.Fatal(err)
		}
		if a.InFlight() != 1 {
			t.Fatalf("%d in flight before the body was closed", a.InFlight())
		}
		resp.Body.Close()
		if a.InFlight() != 0 || a.Limit() != 7 {
			t.Fatalf("in flight %d, limit %d after a 429", a.InFlight(), a.Limit())
		}
	})
}

func TestTransportDropsBeforeSending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		base := &statusTransport{}
		base.status.Store(200)
		l := New(Config{RequestsPerMinute: 6})
		client := &http.Client{Transport: &rebound.Transport{Base: &Transport{Base: base, Limiter: l}}}
		resp, err := client.Get("http://provider.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://provider.test/", nil)
		_, err = client.Do(req)
		if !errors.Is(err, ErrDeadline) || base.sent.Load() != 1 {
			t.Fatalf("err %v, %d sent: a call that would miss its deadline was sent", err, base.sent.Load())
		}
	})
}

// pacer is a Pacer that counts what the Transport asks of it.
type pacer struct{ waits, lessons int }

func (p *pacer) Wait(ctx context.Context, tokens int) error { p.waits += tokens; return nil }
func (p *pacer) Learn(http.Header)                          { p.lessons++ }

func TestTransportTakesAnyPacer(t *testing.T) {
	base := &statusTransport{}
	base.status.Store(200)
	p := &pacer{}
	client := &http.Client{Transport: &Transport{Base: base, Limiter: p, Tokens: func(*http.Request) int { return 7 }}}
	resp, err := client.Get("http://provider.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if p.waits != 7 || p.lessons != 1 {
		t.Fatalf("%d tokens waited for, %d lessons: want 7 and 1", p.waits, p.lessons)
	}
	// A nil *Limiter is no limit, as when the field was a *Limiter.
	var none *Limiter
	client = &http.Client{Transport: &Transport{Base: base, Limiter: none}}
	resp, err = client.Get("http://provider.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// hangingTransport answers only when the request's context ends.
type hangingTransport struct{}

func (hangingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

func TestAttemptTimeoutsCutTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := NewAdaptive(AdaptiveConfig{Initial: 10})
		client := &http.Client{Transport: &rebound.Transport{Base: &Transport{Base: hangingTransport{}, Adaptive: a},
			Policy: rebound.Policy{MaxAttempts: 2, AttemptTimeout: time.Second, BaseDelay: 2 * time.Second, Jitter: rebound.JitterNone}}}
		if _, err := client.Get("http://provider.test/"); err == nil {
			t.Fatal("a hanging provider answered")
		}
		if got := a.Limit(); got != 4 || a.InFlight() != 0 {
			t.Fatalf("limit %d, in flight %d after two timed-out attempts: want 10 × 0.7 × 0.7 = 4, none in flight", got, a.InFlight())
		}
	})
}

func TestReleaseBodyReleasesOnce(t *testing.T) {
	a := NewAdaptive(AdaptiveConfig{Initial: 2})
	a.TryAcquire()
	a.TryAcquire()
	b := &releaseBody{ReadCloser: io.NopCloser(strings.NewReader("")), adaptive: a, signal: Success}
	io.ReadAll(b)
	b.Close()
	b.Close()
	if a.InFlight() != 1 {
		t.Fatalf("in flight %d after one body ended: released more than once", a.InFlight())
	}
}

// streamUpstream answers with an event stream that sends its first
// content and stays open until end is closed (or the stream is), or, while
// status is set to another, with an empty answer of that status.
type streamUpstream struct {
	status atomic.Int64 // 0: an open stream
	sent   atomic.Int64
	end    chan struct{}
}

func newStreamUpstream() *streamUpstream { return &streamUpstream{end: make(chan struct{})} }

func (u *streamUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	u.sent.Add(1)
	if s := int(u.status.Load()); s != 0 {
		return &http.Response{StatusCode: s, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("{}")), Request: req}, nil
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: &openStream{head: strings.NewReader(streamHead), end: u.end, closed: make(chan struct{})}, Request: req}, nil
}

const (
	streamHead = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\n"
	streamTail = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
)

// openStream is the body of streamUpstream's stream.
type openStream struct {
	head   *strings.Reader
	tail   *strings.Reader
	end    <-chan struct{}
	closed chan struct{}
	once   sync.Once
}

func (s *openStream) Read(p []byte) (int, error) {
	if s.head.Len() > 0 {
		return s.head.Read(p)
	}
	if s.tail == nil {
		select {
		case <-s.end:
		case <-s.closed:
			return 0, errors.New("closed")
		}
		s.tail = strings.NewReader(streamTail)
	}
	return s.tail.Read(p)
}

func (s *openStream) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// openStreams sends n streams through client, each left open after its
// first content; it stops at the first error, and returns the streams.
func openStreams(t *testing.T, client *http.Client, n int) ([]*http.Response, error) {
	var open []*http.Response
	for range n {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		context.AfterFunc(t.Context(), cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/v1/chat/completions", strings.NewReader(`{"stream":true}`))
		resp, err := client.Do(req)
		if err != nil {
			cancel()
			return open, err
		}
		open = append(open, resp)
	}
	return open, nil
}

// closeStreams ends the upstream's streams and reads each to its end.
func closeStreams(t *testing.T, up *streamUpstream, open []*http.Response) {
	close(up.end)
	for _, resp := range open {
		if b, err := io.ReadAll(resp.Body); err != nil || !strings.HasSuffix(string(b), streamTail) {
			t.Errorf("a stream read %q, %v", b, err)
		}
		resp.Body.Close()
	}
}

// TestStreamGivesItsSlotBackAtFirstContent: under rebound.Transport, an
// event stream stops counting against the Adaptive limit once its first
// content came, and gives nothing back twice when it ends.
func TestStreamGivesItsSlotBackAtFirstContent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newStreamUpstream()
		a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1})
		client := &http.Client{Transport: &rebound.Transport{Base: &Transport{Base: up, Adaptive: a}}}
		open, err := openStreams(t, client, 3)
		if err != nil {
			closeStreams(t, up, open)
			t.Fatalf("with %d streams open under a limit of 1: %v", len(open), err)
		}
		if a.InFlight() != 0 {
			t.Errorf("%d in flight with 3 streams open past their first content", a.InFlight())
		}
		closeStreams(t, up, open)
		if a.InFlight() != 0 || !a.TryAcquire() {
			t.Errorf("%d in flight after the streams ended", a.InFlight())
		}
	})
}

// TestAdaptiveLimitRecoversAfter429sStop: a limit cut to its least by 429s
// climbs back to where it started once calls succeed again, streams that
// stay open included, within (Initial² − 1)/2 successes (each raises the
// limit by 1/limit, so its square grows by at least 2).
func TestAdaptiveLimitRecoversAfter429sStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := newStreamUpstream()
		a := NewAdaptive(AdaptiveConfig{})
		initial := a.Limit()
		client := &http.Client{Transport: &rebound.Transport{Base: &Transport{Base: up, Adaptive: a}, Policy: rebound.Policy{MaxAttempts: 1}}}
		up.status.Store(http.StatusTooManyRequests)
		for cuts := 0; a.Limit() > 1; cuts++ {
			if cuts == 20 {
				t.Fatalf("limit %d after %d cuts", a.Limit(), cuts)
			}
			resp, err := client.Get("http://provider.test/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			time.Sleep(2 * time.Second) // past the hold on one cut per burst
		}
		up.status.Store(0)
		bound := (initial*initial-1)/2 + 1
		var open []*http.Response
		defer func() { closeStreams(t, up, open) }()
		for a.Limit() < initial {
			if len(open) == bound {
				t.Fatalf("limit %d after %d successful streams, want %d", a.Limit(), len(open), initial)
			}
			more, err := openStreams(t, client, 1)
			open = append(open, more...)
			if err != nil {
				t.Fatalf("stream %d at limit %d: %v", len(open)+1, a.Limit(), err)
			}
		}
		t.Logf("the limit climbed from 1 back to %d in %d successful streams", initial, len(open))
	})
}

// TestSlotWaitIsBounded: a request that finds every Adaptive slot taken
// waits until MaxWait or its deadline passes, whichever comes first, and
// then fails with ErrNoSlot, never sent; under rebound.Transport a wait cut
// by MaxWait is neither retried nor a failure to the breaker.
func TestSlotWaitIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		for _, tc := range []struct {
			name              string
			maxWait, deadline time.Duration
			want              time.Duration
			deadlineErr       bool
		}{
			{"max wait", 5 * time.Second, 0, 5 * time.Second, false},
			{"deadline", 0, 3 * time.Second, 3 * time.Second, true},
			{"deadline before max wait", 5 * time.Second, 3 * time.Second, 3 * time.Second, true},
			{"max wait before deadline", 5 * time.Second, time.Minute, 5 * time.Second, false},
		} {
			up := &statusTransport{}
			up.status.Store(200)
			a := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1})
			a.TryAcquire() // a request in flight holds the only slot
			b := breaker.New("upstream", breaker.Config{ConsecutiveFailures: 1})
			tr := &rebound.Transport{Base: &Transport{Base: up, Adaptive: a, MaxWait: tc.maxWait},
				Policy: rebound.Policy{MaxAttempts: 4, Breaker: b}}
			ctx, cancel := t.Context(), context.CancelFunc(func() {})
			if tc.deadline > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://provider.test/", strings.NewReader("{}"))
			start := time.Now()
			_, err := tr.RoundTrip(req)
			waited := time.Since(start)
			cancel()
			if !errors.Is(err, ErrNoSlot) || errors.Is(err, context.DeadlineExceeded) != tc.deadlineErr {
				t.Errorf("%s: %v, want ErrNoSlot (and DeadlineExceeded: %v)", tc.name, err, tc.deadlineErr)
			}
			if waited != tc.want || up.sent.Load() != 0 || a.InFlight() != 1 {
				t.Errorf("%s: waited %v (want %v), %d sent, %d in flight", tc.name, waited, tc.want, up.sent.Load(), a.InFlight())
			}
			if _, refused := b.Allow(); refused != nil {
				t.Errorf("%s: the breaker opened on a request never sent", tc.name)
			}
		}
	})
}

// bodyTransport answers with a body in pieces, of the given Content-Type.
type bodyTransport struct {
	contentType string
	pieces      []string
}

func (b bodyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	readers := make([]io.Reader, len(b.pieces))
	for i, p := range b.pieces {
		readers[i] = strings.NewReader(p)
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {b.contentType}},
		Body: io.NopCloser(io.MultiReader(readers...)), Request: req}, nil
}

// TestAnswerGivesItsSlotBackWhenItComes: an answer that is not an event
// stream gives its slot back when the first byte of its body other than
// white space is read (the spaces a provider sends to keep the connection
// open before it are not the answer), not when the caller has read it
// all; an event stream read without rebound.Transport holds its slot
// until it ends.
func TestAnswerGivesItsSlotBackWhenItComes(t *testing.T) {
	for _, tc := range []struct {
		contentType string
		held        []int // in flight after each of the four pieces is read
	}{
		{"application/json", []int{1, 1, 0, 0}},
		{"text/event-stream", []int{1, 1, 1, 1}},
	} {
		a := NewAdaptive(AdaptiveConfig{Initial: 10})
		tr := &Transport{Base: bodyTransport{tc.contentType, []string{"  ", "\n", `{"a":`, `1}`}}, Adaptive: a}
		req, _ := http.NewRequest("POST", "http://provider.test/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		var got []int
		for {
			_, err := resp.Body.Read(buf)
			got = append(got, a.InFlight())
			if err != nil {
				break
			}
		}
		resp.Body.Close()
		if len(got) < len(tc.held) || !slices.Equal(got[:len(tc.held)], tc.held) || a.InFlight() != 0 {
			t.Errorf("%s: in flight after each read %v, want %v, then 0 at the end", tc.contentType, got, tc.held)
		}
	}
}
