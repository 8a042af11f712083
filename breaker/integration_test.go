package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
)

func TestDoConsultsTheBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("gpt-x:summarise", breaker.Config{ConsecutiveFailures: 2, Cooldown: time.Minute})
		p := rebound.Policy{MaxAttempts: 5, BaseDelay: rebound.NoDelay, Breaker: b}
		calls := 0
		down := func(context.Context) (string, error) { calls++; return "", &rebound.HTTPError{StatusCode: 503} }

		_, err := rebound.Do(t.Context(), p, down)
		var gu *rebound.GiveUpError
		if calls != 2 || !errors.As(err, &gu) || gu.Reason != rebound.StopBreakerOpen || !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("%d calls, err %v", calls, err)
		}
		var herr *rebound.HTTPError
		if !errors.As(err, &herr) {
			t.Fatalf("the last error is not reachable: %v", err)
		}

		calls = 0
		_, err = rebound.Do(t.Context(), p, down)
		if calls != 0 || !errors.As(err, &gu) || gu.Attempts != 0 || !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("an open breaker let %d calls through: %v", calls, err)
		}

		time.Sleep(time.Minute)
		ok := func(context.Context) (string, error) { calls++; return "fine", nil }
		for range 2 {
			if _, err := rebound.Do(t.Context(), p, ok); err != nil {
				t.Fatal(err)
			}
		}
		if b.State() != breaker.Closed {
			t.Fatalf("state %v after two probe successes", b.State())
		}
	})
}

func TestPermanentErrorsDoNotMoveTheBreaker(t *testing.T) {
	b := breaker.New("m", breaker.Config{ConsecutiveFailures: 1})
	p := rebound.Policy{Breaker: b}
	for range 10 {
		_ = rebound.Run(context.Background(), p, func(context.Context) error { return &rebound.HTTPError{StatusCode: 400} })
		_ = rebound.Run(context.Background(), p, func(context.Context) error {
			return &rebound.HTTPError{StatusCode: 429, Body: []byte(`{"error":{"code":"insufficient_quota"}}`)}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = rebound.Run(ctx, p, func(ctx context.Context) error { return ctx.Err() })
	if b.State() != breaker.Closed {
		t.Fatalf("state %v: a 400, a quota error or a cancellation moved the breaker", b.State())
	}
}

func TestTransportConsultsTheBreaker(t *testing.T) {
	requests := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests++
		http.Error(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, 529)
	}))
	defer srv.Close()
	b := breaker.New("claude-x", breaker.Config{ConsecutiveFailures: 2, Cooldown: time.Hour})
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{MaxAttempts: 5, BaseDelay: time.Millisecond, Breaker: b}}}

	resp, err := client.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// The breaker refused the third attempt: the caller gets the provider's
	// own last answer.
	if requests != 2 || resp.StatusCode != 529 || !strings.Contains(string(body), "overloaded_error") {
		t.Fatalf("%d requests, status %d, body %q", requests, resp.StatusCode, body)
	}
	_, err = client.Post(srv.URL, "application/json", strings.NewReader("{}"))
	if requests != 2 || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("%d requests; err %v", requests, err)
	}
}

// One breaker per model and task, held in a Set, consulted by Do.
func Example() {
	breakers := breaker.NewSet(breaker.Config{ConsecutiveFailures: 3, Cooldown: time.Minute}, 0)
	p := rebound.Policy{MaxAttempts: 10, BaseDelay: rebound.NoDelay, Breaker: breakers.Get("gpt-x:summarise")}

	calls := 0
	err := rebound.Run(context.Background(), p, func(context.Context) error {
		calls++
		return &rebound.HTTPError{StatusCode: http.StatusServiceUnavailable}
	})
	fmt.Println(calls, "calls;", errors.Is(err, breaker.ErrOpen), breakers.Get("gpt-x:summarise").State())
	// Output: 3 calls; true open
}
