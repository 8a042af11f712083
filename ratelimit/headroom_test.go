package ratelimit_test

import (
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
