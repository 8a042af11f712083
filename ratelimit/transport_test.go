package ratelimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
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
	b := &releaseBody{ReadCloser: io.NopCloser(strings.NewReader("")), release: a.Release, signal: Success}
	io.ReadAll(b)
	b.Close()
	b.Close()
	if a.InFlight() != 1 {
		t.Fatalf("in flight %d after one body ended: released more than once", a.InFlight())
	}
}
