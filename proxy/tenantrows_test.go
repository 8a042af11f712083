package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/cost"
)

// TestTenantRowsShowSpendAgainstTheCapUntilThePeriodTurns: the status
// page's rows carry each tenant's spend in the current period, its cap,
// when it resets and its requests; at midnight UTC the spend, and the
// cap, start again.
func TestTenantRowsShowSpendAgainstTheCapUntilThePeriodTurns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := map[string]string{"A": "tok-a", "B": "tok-b"}
		cfg, err := ParseConfig([]byte(`{"upstreams":{"u":{"url":"http://up.invalid"}},
			"prices":{"m":{"input_per_million":1000000,"output_per_million":1000000}},
			"tenants":{"a":{"tokens_env":"A","spend_cap_usd":2.5,"models":["m"]},"b":{"tokens_env":"B"}}}`), func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		answer := `{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`
		upstream := roundTrip(func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(answer)), Request: r}, nil
		})
		p, err := New(Options{Config: cfg, Getenv: func(k string) string { return env[k] }, Base: upstream})
		if err != nil {
			t.Fatal(err)
		}
		send := func(tok string) int {
			req := httptest.NewRequest("POST", "http://localhost/v1/chat/completions", strings.NewReader(`{"model":"m","max_tokens":1}`))
			req.Header.Set("Authorization", "Bearer "+tok)
			w := httptest.NewRecorder()
			p.ServeHTTP(w, req)
			return w.Code
		}
		// Each request is held at about $8 (1 output token, 7 of body at
		// $1 a token): past the cap of $2.50 at once.
		if code := send("tok-a"); code != http.StatusTooManyRequests {
			t.Fatalf("a request held past the cap: %d", code)
		}
		send("tok-b")
		rows := p.tenantRows(context.Background())
		midnight := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
		want := []tenantRow{
			{Name: "a", CapUSD: 2.5, Period: PeriodDay, Resets: midnight, Requests: 1, Refused: 1},
			{Name: "b", SpentUSD: 2, Requests: 1, Tokens: tokenTally{input: 1, output: 1}},
		}
		if len(rows) != 2 || rows[0] != want[0] || rows[1] != want[1] {
			t.Fatalf("rows %+v, want %+v", rows, want)
		}
		time.Sleep(time.Until(midnight) + time.Second)
		if rows := p.tenantRows(context.Background()); rows[1].SpentUSD != 0 || !rows[0].Resets.Equal(midnight.Add(24*time.Hour)) {
			t.Errorf("after midnight: %+v", rows)
		}
	})
}

// TestPeriodCapStartsAgainEachMonth: a monthly cap in memory refuses
// once spent, and allows again on the first of the next month (UTC).
func TestPeriodCapStartsAgainEachMonth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := &periodCap{name: "t", usd: 1, period: PeriodMonth}
		h, err := c.Reserve(context.Background(), 0.6)
		if err != nil {
			t.Fatal(err)
		}
		h.Settle(0.9)
		var capErr *cost.CapError
		if _, err := c.Reserve(context.Background(), 0.2); !errors.As(err, &capErr) || capErr.Cap != "t" {
			t.Fatalf("past the cap: %v", err)
		}
		time.Sleep(time.Until(periodEnd(time.Now(), PeriodMonth)))
		if _, err := c.Reserve(context.Background(), 0.2); err != nil {
			t.Errorf("in the next month: %v", err)
		}
	})
}

// roundTrip is an http.RoundTripper of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// sharedCap is a cap whose period spend is known elsewhere, as
// reboundredis.Cap's is on Redis.
type sharedCap struct {
	cost.Cap
	spent float64
	err   error
}

func (c sharedCap) Spent(context.Context) (float64, error) { return c.spent, c.err }

// TestTenantRowsShowTheSpendOfASharedCap: a tenant's spend on the status
// page is its cap's, settled by every replica, when the cap can tell it;
// a cap that cannot reach its store gives its local view, and never less
// than this process settled.
func TestTenantRowsShowTheSpendOfASharedCap(t *testing.T) {
	env := map[string]string{"A": "tok-a"}
	cfg, err := ParseConfig([]byte(`{"upstreams":{"u":{"url":"http://up.invalid"}},
		"prices":{"m":{"input_per_million":1,"output_per_million":1}},
		"tenants":{"a":{"tokens_env":"A","spend_cap_usd":5,"models":["m"]}}}`), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	shared := &sharedCap{Cap: &cost.Limit{Name: "a", USD: 5}, spent: 3.25}
	p, err := New(Options{Config: cfg, Getenv: func(k string) string { return env[k] },
		TenantCap: func(string, float64, string) cost.Cap { return shared }})
	if err != nil {
		t.Fatal(err)
	}
	if rows := p.tenantRows(context.Background()); rows[0].SpentUSD != 3.25 {
		t.Fatalf("rows %+v; want the shared cap's $3.25", rows)
	}
	p.tenants.list[0].addSpend(4)
	shared.spent, shared.err = 1.5, errors.New("store away")
	if rows := p.tenantRows(context.Background()); rows[0].SpentUSD != 4 {
		t.Fatalf("rows %+v; want $4, what this process settled, over a stale local view of $1.5", rows)
	}
}

// TestStatusCountsNoCallForARequestItsTenantsCapRefused: a request its
// tenant's spend cap refuses before sending is no call to the upstream's
// key on the status page: a flood of them would bury its calls and retry
// rate.
func TestStatusCountsNoCallForARequestItsTenantsCapRefused(t *testing.T) {
	env := map[string]string{"A": "tok-a", "B": "tok-b"}
	cfg, err := ParseConfig([]byte(`{"upstreams":{"u":{"url":"http://up.invalid"}},
		"prices":{"m":{"input_per_million":1000000,"output_per_million":1000000}},
		"tenants":{"a":{"tokens_env":"A","spend_cap_usd":2.5,"models":["m"]},"b":{"tokens_env":"B"}}}`), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	upstream := roundTrip(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)), Request: r}, nil
	})
	p, err := New(Options{Config: cfg, Getenv: func(k string) string { return env[k] }, Base: upstream})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"tok-a", "tok-a", "tok-a", "tok-b"} {
		req := httptest.NewRequest("POST", "http://localhost/v1/chat/completions", strings.NewReader(`{"model":"m","max_tokens":1}`))
		req.Header.Set("Authorization", "Bearer "+tok)
		p.ServeHTTP(httptest.NewRecorder(), req)
	}
	s := p.status(context.Background(), time.Now())
	if len(s.Upstreams) != 1 || s.Upstreams[0].Calls != 1 || s.Upstreams[0].Attempts != 1 {
		t.Fatalf("upstreams %+v; want u with the one call of b, not a's three refusals", s.Upstreams)
	}
	if s.Tenants[0].Refused != 3 {
		t.Fatalf("tenants %+v; want a's three refusals", s.Tenants)
	}
}
