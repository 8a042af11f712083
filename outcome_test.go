package rebound_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// TestOutcomeOf: what each attempt tells a breaker. A rate limit that
// came with a server wait is the limiter's and the retry loop's business,
// not a sign the provider is down; one without a wait, and every other
// failure the provider is to blame for, counts.
func TestOutcomeOf(t *testing.T) {
	fail := errors.New("failed")
	for _, c := range []struct {
		name string
		err  error
		v    rebound.Verdict
		want rebound.Outcome
	}{
		{"success", nil, rebound.Verdict{}, rebound.OutcomeSuccess},
		{"transient", fail, rebound.Verdict{Kind: rebound.KindTransient}, rebound.OutcomeFailure},
		{"rate limited", fail, rebound.Verdict{Kind: rebound.KindRateLimited}, rebound.OutcomeFailure},
		{"rate limited with a wait", fail, rebound.Verdict{Kind: rebound.KindRateLimited, ServerWait: 2 * time.Second, HasServerWait: true}, rebound.OutcomeIgnored},
		{"rate limited with a wait of zero", fail, rebound.Verdict{Kind: rebound.KindRateLimited, HasServerWait: true}, rebound.OutcomeIgnored},
		{"overloaded with a wait", fail, rebound.Verdict{Kind: rebound.KindOverloaded, ServerWait: time.Second, HasServerWait: true}, rebound.OutcomeFailure},
		{"transient with a wait", fail, rebound.Verdict{Kind: rebound.KindTransient, ServerWait: time.Second, HasServerWait: true}, rebound.OutcomeFailure},
		{"quota exhausted", fail, rebound.Verdict{Kind: rebound.KindQuotaExhausted}, rebound.OutcomeIgnored},
		{"permanent", fail, rebound.Verdict{Kind: rebound.KindPermanent}, rebound.OutcomeIgnored},
	} {
		if got := rebound.OutcomeOf(c.err, c.v); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// outcomeBreaker allows every attempt and notes each outcome.
type outcomeBreaker struct {
	mu       sync.Mutex
	outcomes []rebound.Outcome
}

func (b *outcomeBreaker) Allow() (rebound.Permit, error) { return 0, nil }

func (b *outcomeBreaker) Done(_ rebound.Permit, o rebound.Outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.outcomes = append(b.outcomes, o)
}

// TestTransportBreakerIgnoresRateLimitWithServerWait: through a
// Transport, a 429 with Retry-After is not held against the provider; a
// 429 without one is, and a 200 is a success.
func TestTransportBreakerIgnoresRateLimitWithServerWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n int
		base := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			n++
			resp := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}, Request: r,
				Body: io.NopCloser(strings.NewReader(`{"error":{"message":"slow down"}}`))}
			switch n {
			case 1:
				resp.Header.Set("Retry-After", "1")
			case 3:
				resp.StatusCode = http.StatusOK
				resp.Body = io.NopCloser(strings.NewReader(`{}`))
			}
			return resp, nil
		})
		b := &outcomeBreaker{}
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay, Breaker: b}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/chat/completions", strings.NewReader(`{}`))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		want := []rebound.Outcome{rebound.OutcomeIgnored, rebound.OutcomeFailure, rebound.OutcomeSuccess}
		if len(b.outcomes) != len(want) || b.outcomes[0] != want[0] || b.outcomes[1] != want[1] || b.outcomes[2] != want[2] {
			t.Errorf("outcomes %v, want %v", b.outcomes, want)
		}
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
