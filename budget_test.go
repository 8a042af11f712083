package rebound_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// budgetTTL is a zero RetryBudget's TTL, as its doc gives it.
const budgetTTL = 10 * time.Second

func TestRetryBudgetReserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var b rebound.RetryBudget // 10 retries a second over 10 s, and 10% of calls
		now := time.Now()
		for i := range 100 {
			if !b.Withdraw(now) {
				t.Fatalf("the reserve refused retry %d of 100", i+1)
			}
		}
		if b.Withdraw(now) || b.Available(now) != 0 {
			t.Fatal("the reserve allowed a 101st retry with no calls")
		}
		for range 20 {
			b.Deposit(now)
		}
		first, second, third := b.Withdraw(now), b.Withdraw(now), b.Withdraw(now)
		if !first || !second || third {
			t.Fatal("20 calls at a ratio of 0.1 should allow exactly 2 more retries")
		}
		time.Sleep(budgetTTL) // virtual: everything is forgotten
		if got := b.Available(time.Now()); got != 100 {
			t.Fatalf("after the TTL %v retries available, want the reserve of 100", got)
		}
	})
}

func TestRetryBudgetRatio(t *testing.T) {
	b := &rebound.RetryBudget{MinPerSecond: -1, Ratio: 0.2}
	now := time.Now()
	for range 50 {
		b.Deposit(now)
	}
	n := 0
	for b.Withdraw(now) {
		n++
	}
	if n != 10 {
		t.Fatalf("50 calls at a ratio of 0.2 allowed %d retries, want 10", n)
	}
}

// TestBudgetCapsAmplification: a full outage, 1000 calls of 4 attempts
// each sharing one budget: without it the provider would see 4000
// attempts; with it, the calls plus about a tenth of them plus the reserve.
func TestBudgetCapsAmplification(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &rebound.RetryBudget{}
		p := rebound.Policy{MaxAttempts: 4, BaseDelay: rebound.NoDelay, Budget: budget}
		attempts, refused := 0, 0
		for range 1000 {
			err := rebound.Run(t.Context(), p, func(context.Context) error { attempts++; return &rebound.HTTPError{StatusCode: 503} })
			var gu *rebound.GiveUpError
			if errors.As(err, &gu) && gu.Reason == rebound.StopRetryBudget {
				refused++
			}
		}
		if max := 1000 + 100 + 100 + 1; attempts > max || refused < 900 {
			t.Fatalf("%d attempts (at most %d), %d calls stopped by the budget", attempts, max, refused)
		}
		t.Logf("%d attempts for 1000 calls (amplification %.2f), %d stopped by the budget", attempts, float64(attempts)/1000, refused)
	})
}

func TestBudgetShowsInEvents(t *testing.T) {
	budget := &rebound.RetryBudget{MinPerSecond: -1}
	for range 10 {
		budget.Deposit(time.Now())
	}
	var left []float64
	var reason rebound.StopReason
	p := rebound.Policy{MaxAttempts: 5, BaseDelay: rebound.NoDelay, Budget: budget, Observer: rebound.ObserverFunc(func(e rebound.Event) {
		switch e.Type {
		case rebound.EventRetry:
			left = append(left, e.BudgetLeft)
		case rebound.EventGiveUp:
			reason = e.Reason
		}
	})}
	err := rebound.Run(context.Background(), p, func(context.Context) error { return &rebound.HTTPError{StatusCode: 503} })
	// 11 calls' deposits (the 10 above and this one) at 0.1: one retry.
	if len(left) != 1 || left[0] > 0.11 || reason != rebound.StopRetryBudget || !strings.Contains(err.Error(), "retry budget exhausted") {
		t.Fatalf("budget left %v, reason %v, err %v", left, reason, err)
	}
}

// TestTransportKeepsABudgetPerHost: a Transport facing a full outage on
// one host retries about a tenth of its calls there, beyond the reserve,
// and another host still has its own.
func TestTransportKeepsABudgetPerHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{statuses: []int{503}}
		client := &http.Client{Transport: &rebound.Transport{Base: &handlerTransport{h: s}, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}}
		for range 500 {
			resp, err := client.Get("http://down.test/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
		if n := s.count(); n > 500+100+50+1 {
			t.Fatalf("%d requests for 500 calls: the budget did not cap retries", n)
		}
		before := s.count()
		resp, err := client.Get("http://other.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if s.count()-before != 3 {
			t.Fatalf("another host got %d attempts, want 3: it has a budget of its own", s.count()-before)
		}
	})
}

func TestBudgetRefundsARetryNeverMade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := &rebound.RetryBudget{}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		_ = rebound.Run(ctx, rebound.Policy{BaseDelay: 10 * time.Second, Jitter: rebound.JitterNone, Budget: budget},
			func(context.Context) error { return &rebound.HTTPError{StatusCode: 503} })
		// One call deposited 0.1; its retry was withdrawn, then cut short and refunded.
		if got := budget.Available(time.Now()); got < 100.09 || got > 100.11 {
			t.Fatalf("%v retries available, want the reserve of 100 plus 0.1", got)
		}
	})
}

// TestRetryBudgetClocksBefore1970: a zero time.Time (an injected clock
// never set) and dates before 1970 count as any other.
func TestRetryBudgetClocksBefore1970(t *testing.T) {
	for _, start := range []time.Time{{}, time.Date(1969, 12, 31, 23, 59, 59, 500, time.UTC), time.Unix(-1, 0), time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC)} {
		b := &rebound.RetryBudget{MinPerSecond: -1}
		now := start
		for range 30 {
			b.Deposit(now)
			now = now.Add(100 * time.Millisecond)
		}
		n := 0
		for b.Withdraw(now) {
			n++
		}
		if n != 3 {
			t.Fatalf("%v: 30 calls at a ratio of 0.1 allowed %d retries, want 3", start, n)
		}
		if got := b.Available(now.Add(budgetTTL + time.Second)); got != 0 {
			t.Fatalf("%v: %v retries available after the TTL with no reserve, want 0", start, got)
		}
	}
}

// TestRetryBudgetClockGoesBack: a clock stepped back neither panics nor
// leaves the budget blocked: what was recorded at the later time is not
// counted, and the budget works from the earlier time on.
func TestRetryBudgetClockGoesBack(t *testing.T) {
	b := &rebound.RetryBudget{}
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for b.Withdraw(now) {
	}
	for _, back := range []time.Duration{time.Second, budgetTTL, 365 * 24 * time.Hour} {
		then := now.Add(-back)
		if got := b.Available(then); got != 100 {
			t.Fatalf("%v back: %v retries available, want the reserve of 100", back, got)
		}
		if !b.Withdraw(then) {
			t.Fatalf("%v back: the budget refused a retry", back)
		}
		b.Refund(then)
	}
}

// A retry withdrawn, then refunded after a wait longer than the budget's
// memory, makes no token: the refund goes to the withdrawal's slot, which
// is forgotten with the deposits it was drawn against.
func TestRetryBudgetRefundAfterALongWait(t *testing.T) {
	b := &rebound.RetryBudget{MinPerSecond: -1} // no reserve: every token is a deposit's
	t0 := time.Unix(1_700_000_000, 0)
	for range 100 {
		b.Deposit(t0)
	}
	for range 10 {
		if !b.Withdraw(t0) {
			t.Fatal("the deposits allow 10 retries")
		}
	}
	later := t0.Add(30 * time.Second)
	for range 10 {
		b.Refund(t0) // the withdrawals' own time, after a 30 s wait
	}
	if got := b.Available(later); got != 0 {
		t.Fatalf("%v retries allowed 30 s later, with nothing deposited since", got)
	}
	// Within the window, a refund gives the retry back.
	for range 10 {
		b.Deposit(later)
	}
	if !b.Withdraw(later) {
		t.Fatal("ten deposits make a retry")
	}
	b.Refund(later)
	if got := b.Available(later); got != 1 {
		t.Fatalf("after a refund %v, want 1", got)
	}
}

// A call whose wait, longer than the budget's memory, is cut short refunds
// its retry as of when it was withdrawn: no token is made of it.
func TestRefundIsDatedByTheWithdrawal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := &rebound.RetryBudget{MinPerSecond: -1} // no reserve; TTL 10 s
		for range 100 {
			b.Deposit(time.Now())
		}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(29*time.Second, cancel)
		p := rebound.Policy{Budget: b, MaxServerWait: time.Minute}
		rateLimited := &rebound.HTTPError{StatusCode: 429, Header: http.Header{"Retry-After": {"30"}}}
		err := rebound.Run(ctx, p, func(context.Context) error { return rateLimited })
		if !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if got := b.Available(time.Now()); got != 0 {
			t.Fatalf("%v retries available 29 s on, with nothing deposited in the last 10 s", got)
		}
	})
}
