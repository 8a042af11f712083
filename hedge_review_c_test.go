package rebound_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// H9: AttemptTimeout ends the first racer while its hedge wins: the
// first is a failure, the hedge a success, each settled once.
func TestReviewHeldAttemptTimeoutInRacer(t *testing.T) {
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

// H10: one racer's stream fails with an in-band error before content;
// the other's content wins.
func TestReviewHeldInBandErrorRacer(t *testing.T) {
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

// H11: a real server and http.Transport: the slow racer is cut, the
// connections go; goleak checks the rest at the end.
func TestReviewHeldRealServer(t *testing.T) {
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
	_ = errors.New
}
