package reboundredis

import (
	"net/http"
	"testing"

	"github.com/rebound-go/rebound/ratelimit"
)

func TestLimiterHeadroomIsWhatThisReplicaReadLessWhatItSent(t *testing.T) {
	s := testStore(t)
	l := NewLimiter(s, "headroom", ratelimit.Config{})
	if h := l.Headroom(); h.Known || h.Least() != 1 {
		t.Errorf("before any header: %+v, want full and unknown", h)
	}
	l.Learn(http.Header{"X-Ratelimit-Limit-Requests": {"10"}, "X-Ratelimit-Remaining-Requests": {"4"}, "X-Ratelimit-Reset-Requests": {"1m0s"}})
	if err := l.Wait(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if !l.Allow(1) {
		t.Fatal("not allowed with room left")
	}
	if h := l.Headroom(); !h.Known || h.Requests != 0.2 || h.Tokens != 1 {
		t.Errorf("after the headers and two calls: %+v, want 0.2 of the requests, tokens unknown", h)
	}
}
