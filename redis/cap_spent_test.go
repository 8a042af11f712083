package reboundredis

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

func nearUSD(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestCapSpentIsEveryReplicasSettledSpend: Spent reads the period's
// settled spend of all the replicas from Redis, without the holds not yet
// settled, and is the same read from any replica.
func TestCapSpentIsEveryReplicasSettledSpend(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	cfg := CapConfig{USD: 1, Replicas: 2}
	one, two := s.Cap("team", cfg), s.Cap("team", cfg)
	if usd, err := one.Spent(ctx); err != nil || usd != 0 {
		t.Fatalf("before any spend: Spent = %v, %v; want 0, nil", usd, err)
	}
	for _, step := range []struct {
		c   *Cap
		usd float64
	}{{one, 0.2}, {two, 0.3}} {
		h, err := step.c.Reserve(ctx, 0.35)
		if err != nil {
			t.Fatal(err)
		}
		h.Settle(step.usd)
	}
	if _, err := one.Reserve(ctx, 0.1); err != nil { // held, not spent
		t.Fatal(err)
	}
	for i, c := range []*Cap{one, two} {
		if usd, err := c.Spent(ctx); err != nil || !nearUSD(usd, 0.5) {
			t.Fatalf("replica %d: Spent = %v, %v; want 0.5 (both replicas' settles, no holds), nil", i+1, usd, err)
		}
	}
	if usd, err := s.Cap("other", cfg).Spent(ctx); err != nil || usd != 0 {
		t.Fatalf("another cap's Spent = %v, %v; want 0", usd, err)
	}
}

// TestCapSpentIsTheLocalViewWhileRedisIsAway: with Redis gone, Spent says
// so and gives Redis's last figure plus what this replica spent since;
// once Redis is back the unsent spend is counted once.
func TestCapSpentIsTheLocalViewWhileRedisIsAway(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	cfg.RetryEvery = time.Millisecond
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := s.Cap("team", CapConfig{USD: 1})
	h, err := c.Reserve(ctx, 0.3)
	if err != nil {
		t.Fatal(err)
	}
	h.Settle(0.2)

	srv.Stop()
	h, err = c.Reserve(ctx, 0.1) // on the replica's share
	if err != nil {
		t.Fatalf("a hold within the share while Redis is away: %v", err)
	}
	h.Settle(0.1)
	usd, err := c.Spent(ctx)
	if !errors.Is(err, ErrUnavailable) || !nearUSD(usd, 0.3) {
		t.Fatalf("Redis away: Spent = %v, %v; want 0.3 (0.2 heard from Redis, 0.1 spent here) and ErrUnavailable", usd, err)
	}

	srv.Start() // empty: a Redis without persistence forgets the period
	if usd, err := c.Spent(ctx); err != nil || !nearUSD(usd, 0.1) {
		t.Fatalf("Redis back, empty: Spent = %v, %v; want 0.1, the unsent spend, nil", usd, err)
	}
	h, err = c.Reserve(ctx, 0.05) // sends the unsent spend
	if err != nil {
		t.Fatal(err)
	}
	h.Settle(0.05)
	if usd, err := c.Spent(ctx); err != nil || !nearUSD(usd, 0.15) {
		t.Fatalf("after the unsent spend reached Redis: Spent = %v, %v; want 0.15 (counted once), nil", usd, err)
	}
}

// TestCapSpentCountsASettleOnceWhoseAnswerWasLost: a settle that reached
// Redis but whose answer did not come back (still in the replica's list
// to send again) is counted once; one Redis has not heard is counted.
func TestCapSpentCountsASettleOnceWhoseAnswerWasLost(t *testing.T) {
	s := testStore(t)
	ctx := context.Background()
	c := s.Cap("team", CapConfig{USD: 1})
	h, err := c.Reserve(ctx, 0.3)
	if err != nil {
		t.Fatal(err)
	}
	h.Settle(0.2)
	st := c.state()
	st.mu.Lock()
	st.settles = append(st.settles, capItem{h.(*capHold).member, 200000}, capItem{"h:unheard", 50000})
	st.mu.Unlock()
	if usd, err := c.Spent(ctx); err != nil || !nearUSD(usd, 0.25) {
		t.Fatalf("Spent = %v, %v; want 0.25: the heard settle once, the unheard one added", usd, err)
	}
}
