package fallback_test

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/fallback"
)

// keyPool returns a chain over one pooled target per provider, each with
// its headroom, ending with the last resort as a proxy's does.
func keyPool(providers []*provider, headroom []float64, cooldowns fallback.Cooldowns) *fallback.Chain[*http.Request, *http.Response] {
	ch := &fallback.Chain[*http.Request, *http.Response]{LastResort: true, Cooldowns: cooldowns,
		Discard: func(r *http.Response) {
			if r != nil {
				r.Body.Close()
			}
		}}
	for i, p := range providers {
		t := upstream("key"+string(rune('A'+i)), p, rebound.Policy{MaxAttempts: 3, BaseDelay: time.Second})
		t.Pool = "provider"
		h := headroom[i]
		t.Headroom = func() float64 { return h }
		ch.Targets = append(ch.Targets, t)
	}
	return ch
}

func ok() *provider { return &provider{status: 200, body: `{"ok":true}`} }

func rateLimited() *provider {
	return &provider{status: 429, body: `{"error":{"type":"requests","code":"rate_limit_exceeded","message":"Rate limit reached"}}`,
		header: http.Header{"Retry-After": {"30"}}}
}

func TestPooledTargetsAreTriedByHeadroomMostFirst(t *testing.T) {
	a, b, c := ok(), ok(), ok()
	ch := keyPool([]*provider{a, b, c}, []float64{0.2, 0.9, 0.5}, nil)
	res, err := ch.Do(context.Background(), newRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	res.Value.Body.Close()
	if res.Target != "keyB" || a.hits.Load()+c.hits.Load() != 0 {
		t.Errorf("answered by %s (hits %d %d %d), want keyB, the most headroom, alone", res.Target, a.hits.Load(), b.hits.Load(), c.hits.Load())
	}
}

func TestPooledTargetCoolingDownIsSkippedForTheNextByHeadroom(t *testing.T) {
	a, b, c := ok(), ok(), ok()
	cool := &fallback.MemoryCooldowns{}
	cool.Start(context.Background(), "keyB", time.Now(), time.Hour)
	ch := keyPool([]*provider{a, b, c}, []float64{0.2, 0.9, 0.5}, cool)
	res, err := ch.Do(context.Background(), newRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	res.Value.Body.Close()
	if res.Target != "keyC" || b.hits.Load() != 0 {
		t.Errorf("answered by %s (keyB hit %d times), want keyC with keyB cooling down", res.Target, b.hits.Load())
	}
}

func TestPooledTargetOutOfQuotaIsNotTheLastResort(t *testing.T) {
	// keyC, cooling down and last in the pool, is not heard out as the
	// last resort: keyA is, and its own 429 is the answer after its
	// retries.
	a, b, c := rateLimited(), rateLimited(), ok()
	cool := &fallback.MemoryCooldowns{}
	cool.Start(context.Background(), "keyC", time.Now(), time.Hour)
	ch := keyPool([]*provider{a, b, c}, []float64{0.2, 0.9, 0.5}, cool)
	synctest.Test(t, func(t *testing.T) {
		res, err := ch.Do(context.Background(), newRequest(t))
		if err == nil {
			t.Fatal("answered, want the last resort's 429")
		}
		if res.Value == nil || res.Value.StatusCode != 429 {
			t.Fatalf("value %v, want keyA's 429", res.Value)
		}
		res.Value.Body.Close()
	})
	if c.hits.Load() != 0 || b.hits.Load() != 1 || a.hits.Load() < 2 {
		t.Errorf("hits A %d B %d C %d, want B once (moved on), A retried (the last resort), C never (cooling down)", a.hits.Load(), b.hits.Load(), c.hits.Load())
	}
}

func TestRateLimitedPooledTargetMovesToTheNextBeforeAnyWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := rateLimited(), ok()
		ch := keyPool([]*provider{a, b}, []float64{0.9, 0.1}, nil)
		start := time.Now()
		res, err := ch.Do(context.Background(), newRequest(t))
		if err != nil {
			t.Fatal(err)
		}
		res.Value.Body.Close()
		if waited := time.Since(start); waited != 0 || res.Target != "keyB" || a.hits.Load() != 1 {
			t.Errorf("answered by %s after %v, keyA hit %d times; want keyB at once after keyA's one 429", res.Target, waited, a.hits.Load())
		}
	})
}

func TestRateLimitedTargetOutsideAPoolWaitsAndRetries(t *testing.T) {
	// The same two targets, not pooled: the 429 is retried under the
	// first one's policy after the server's 30 s, as outside a pool.
	synctest.Test(t, func(t *testing.T) {
		a, b := rateLimited(), ok()
		ch := keyPool([]*provider{a, b}, []float64{0.9, 0.1}, nil)
		for i := range ch.Targets {
			ch.Targets[i].Pool = ""
		}
		start := time.Now()
		res, err := ch.Do(context.Background(), newRequest(t))
		if err != nil {
			t.Fatal(err)
		}
		res.Value.Body.Close()
		if waited := time.Since(start); waited < 30*time.Second || a.hits.Load() < 2 {
			t.Errorf("waited %v, keyA hit %d times; want keyA retried after the server's 30 s", waited, a.hits.Load())
		}
	})
}

func TestPooledTargetsOfEqualHeadroomTakeTurns(t *testing.T) {
	a, b, c := ok(), ok(), ok()
	ch := keyPool([]*provider{a, b, c}, []float64{1, 1, 1}, nil)
	for range 6 {
		res, err := ch.Do(context.Background(), newRequest(t))
		if err != nil {
			t.Fatal(err)
		}
		res.Value.Body.Close()
	}
	if a.hits.Load() != 2 || b.hits.Load() != 2 || c.hits.Load() != 2 {
		t.Errorf("hits %d %d %d, want 2 each: targets that know nothing of their limits take turns", a.hits.Load(), b.hits.Load(), c.hits.Load())
	}
}
