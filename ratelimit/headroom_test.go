package ratelimit_test

import (
	"errors"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/ratelimit"
)

func TestHeadroomIsWhatTheHeadersLeftLessWhatWasSentSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(ratelimit.Config{})
		if h := l.Headroom(); h != (ratelimit.Headroom{Requests: 1, Tokens: 1}) {
			t.Errorf("before any header: %+v, want full and unknown", h)
		}
		l.Learn(http.Header{
			"X-Ratelimit-Limit-Requests": {"100"}, "X-Ratelimit-Remaining-Requests": {"40"}, "X-Ratelimit-Reset-Requests": {"10s"},
			"X-Ratelimit-Limit-Tokens": {"1000"}, "X-Ratelimit-Remaining-Tokens": {"500"}, "X-Ratelimit-Reset-Tokens": {"10s"},
		})
		if h := l.Headroom(); h != (ratelimit.Headroom{Requests: 0.4, Tokens: 0.5, Known: true}) {
			t.Errorf("after the headers: %+v, want 0.4 and 0.5, known", h)
		}
		if !l.Allow(100) {
			t.Fatal("a call with room left was not allowed")
		}
		if h := l.Headroom(); h.Requests != 0.39 || h.Tokens != 0.4 || h.Least() != 0.39 {
			t.Errorf("after a call of 100 tokens: %+v (least %v), want 0.39 and 0.4", h, h.Least())
		}
		time.Sleep(10 * time.Second)
		if h := l.Headroom(); h != (ratelimit.Headroom{Requests: 1, Tokens: 1}) {
			t.Errorf("after the reset: %+v, want full and unknown", h)
		}
	})
}

// countingBase answers 200 and counts the requests it got.
type countingBase struct{ n int }

func (c *countingBase) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n++
	return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
}

func TestRequestThePaceWouldHoldPastMaxPaceWaitFailsAtOnceUnsent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(ratelimit.Config{})
		// Nothing left for a minute.
		l.Learn(http.Header{"X-Ratelimit-Limit-Requests": {"100"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"1m0s"}})
		base := &countingBase{}
		tr := &ratelimit.Transport{Base: base, Limiter: l, MaxPaceWait: 2 * time.Second}
		req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://provider.test/v1/chat/completions", http.NoBody)
		start := time.Now()
		_, err := tr.RoundTrip(req)
		if !errors.Is(err, ratelimit.ErrOverPace) || time.Since(start) != 0 || base.n != 0 {
			t.Errorf("err %v after %v, %d sent; want ErrOverPace at once, nothing sent", err, time.Since(start), base.n)
		}
		// Within the bound, it waits its turn.
		tr.MaxPaceWait = 2 * time.Minute
		resp, err := tr.RoundTrip(req.Clone(t.Context()))
		if err != nil || base.n != 1 || time.Since(start) < time.Minute {
			t.Errorf("err %v after %v, %d sent; want sent after the reset", err, time.Since(start), base.n)
		}
		if resp != nil {
			resp.Body.Close()
		}
	})
}

func TestReadySaysACallWouldGoAtOnceAndCountsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := ratelimit.New(ratelimit.Config{RequestsPerMinute: 60}) // a burst of one, then 59 a minute
		for range 3 {
			if !l.Ready(1) {
				t.Fatal("not ready with the burst unspent")
			}
		}
		if !l.Allow(1) {
			t.Fatal("the burst was spent by asking whether it was ready")
		}
		if l.Ready(1) {
			t.Error("ready with the burst spent, before the pace gives another call")
		}
		time.Sleep(2 * time.Second)
		if !l.Ready(1) {
			t.Error("not ready two seconds later")
		}
		l.Learn(http.Header{"X-Ratelimit-Limit-Requests": {"100"}, "X-Ratelimit-Remaining-Requests": {"0"}, "X-Ratelimit-Reset-Requests": {"1m0s"}})
		if l.Ready(1) {
			t.Error("ready with nothing left until the reset")
		}
	})
}

func TestAdaptiveFreeSaysACallWouldHaveASlotAtOnce(t *testing.T) {
	a := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 2})
	for i := range 2 {
		if !a.Free() || !a.TryAcquire() {
			t.Fatalf("slot %d not free", i+1)
		}
	}
	if a.Free() {
		t.Error("free with both slots taken")
	}
	a.Release(ratelimit.Neutral)
	if !a.Free() {
		t.Error("not free with a slot given back")
	}
}
