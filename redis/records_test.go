package reboundredis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/tool"
)

// replicas returns n Records sharing cfg's Redis and prefix, each on a
// Store of its own, as n replicas of a service have.
func recordReplicas(t *testing.T, cfg Config, n int) []*Records {
	t.Helper()
	rs := make([]*Records, n)
	for i := range rs {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if rs[i], err = NewRecords(s, RecordsConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	return rs
}

func TestRecordsClaimAndComplete(t *testing.T) {
	cfg := testConfig(t, redisURL())
	rs := recordReplicas(t, cfg, 3)
	a, b, stranger := rs[0], rs[1], rs[2]
	ctx := context.Background()
	c, err := a.Claim(ctx, "k", time.Minute)
	if err != nil || !strings.HasPrefix(c.Token, sharedToken) || c.PriorRunUnknown || c.Record != nil {
		t.Fatalf("%+v %v", c, err)
	}
	for _, r := range rs { // held on every replica, the claimant's included
		if c, err := r.Claim(ctx, "k", time.Minute); err != nil || c.Token != "" || c.Record != nil {
			t.Fatalf("a held key: %+v %v", c, err)
		}
	}
	// A record that is not the holder's is kept only where it was made.
	if err := stranger.Complete(ctx, "k", sharedToken+"stranger", tool.Record{Output: "forged"}); !errors.Is(err, errNotHeld) {
		t.Fatalf("a stranger completed the claim: %v", err)
	}
	if err := a.Extend(ctx, "k", c.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := tool.Record{Failure: &tool.Failure{Tool: "send", CallID: "c", Verdict: "transient", Attempts: 1,
		Error: "context deadline exceeded", MayHaveTakenEffect: true, Advice: "Check."}}
	if err := a.Complete(ctx, "k", c.Token, rec); err != nil {
		t.Fatal(err)
	}
	got, err := b.Claim(ctx, "k", time.Minute)
	if err != nil || got.Record == nil || *got.Record.Failure != *rec.Failure || got.Token != "" {
		t.Fatalf("%+v %v", got, err)
	}
	ttl := cfg.Client.PTTL(ctx, a.store.key("call", "k")).Val()
	if ttl <= 0 || ttl > tool.DefaultRecordTTL {
		t.Fatalf("a record expires in %v, want within %v", ttl, tool.DefaultRecordTTL)
	}

	// A release leaves nothing behind, and the call may be made again.
	c, _ = a.Claim(ctx, "r", time.Minute)
	if err := a.Release(ctx, "r", c.Token); err != nil {
		t.Fatal(err)
	}
	if n := cfg.Client.Exists(ctx, a.store.key("call", "r")).Val(); n != 0 {
		t.Fatal("a released key was kept")
	}
	if c, _ := b.Claim(ctx, "r", time.Minute); c.Token == "" || c.PriorRunUnknown {
		t.Fatalf("%+v", c)
	}
}

// TestRecordsLeaseExpiry: a holder that stops renewing its claim loses it
// when its lease runs out, by the Redis server's clock; the next claimant
// is told that the first run's outcome is unknown, until a record says
// otherwise.
func TestRecordsLeaseExpiry(t *testing.T) {
	rs := recordReplicas(t, testConfig(t, redisURL()), 2)
	a, b := rs[0], rs[1]
	ctx := context.Background()
	dead, _ := a.Claim(ctx, "k", 100*time.Millisecond)
	if c, _ := b.Claim(ctx, "k", time.Minute); c.Token != "" {
		t.Fatalf("a live lease was taken: %+v", c)
	}
	time.Sleep(150 * time.Millisecond) // the lease runs out on the Redis server's clock
	c, err := b.Claim(ctx, "k", time.Minute)
	if err != nil || c.Token == "" || !c.PriorRunUnknown {
		t.Fatalf("%+v %v", c, err)
	}
	if err := a.Complete(ctx, "k", dead.Token, tool.Record{Output: "late"}); !errors.Is(err, errNotHeld) {
		t.Fatalf("the dead holder recorded over the new one: %v", err)
	}
	// The late run is still answered from on the replica that made it.
	if c, _ := a.Claim(ctx, "k", time.Minute); c.Record == nil || c.Record.Output != "late" {
		t.Fatalf("the dead holder's replica forgot its run: %+v", c)
	}
	if err := b.Release(ctx, "k", c.Token); err != nil {
		t.Fatal(err)
	}
	c, _ = b.Claim(ctx, "k", time.Minute)
	if c.Token == "" || !c.PriorRunUnknown {
		t.Fatalf("a release forgot the first run's doubt: %+v", c)
	}
	b.Complete(ctx, "k", c.Token, tool.Record{Output: "done"})
	// The record keeps the doubt: a repeat answered from it is told.
	if c, _ := b.Claim(ctx, "k", time.Minute); c.Record == nil || c.Record.Output != "done" || !c.PriorRunUnknown {
		t.Fatalf("%+v", c)
	}
}

// TestRecordsWhileRedisIsAway: claims are decided on each replica's own
// records; those records still answer the replica's repeats when Redis is
// back, and so does a record that could not be shared. (How long a claim
// waits for Redis: TestEveryPartWaitsForAStalledRedisNoLongerThanTimeout.)
func TestRecordsWhileRedisIsAway(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	cfg.RetryEvery = 100 * time.Millisecond
	rs := recordReplicas(t, cfg, 2)
	a, b := rs[0], rs[1]
	ctx := context.Background()

	// Claimed on Redis; Redis goes before the record is written.
	shared, _ := a.Claim(ctx, "shared", 500*time.Millisecond)
	if !strings.HasPrefix(shared.Token, sharedToken) {
		t.Fatalf("%+v", shared)
	}
	srv.Stop()
	decide := func(r *Records, key string) tool.Claim {
		t.Helper()
		c, err := r.Claim(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("a claim while Redis is away: %v", err)
		}
		return c
	}
	if err := a.Complete(ctx, "shared", shared.Token, tool.Record{Output: "shared"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("a record Redis never got: %v", err)
	}
	if c := decide(a, "shared"); c.Record == nil || c.Record.Output != "shared" {
		t.Fatalf("the replica forgot its own record: %+v", c)
	}

	c := decide(a, "local")
	if !strings.HasPrefix(c.Token, localToken) {
		t.Fatalf("%+v", c)
	}
	if again := decide(a, "local"); again.Token != "" || again.Record != nil {
		t.Fatalf("the replica's own claim was not held: %+v", again)
	}
	// The reduced guarantee: another replica knows nothing of it.
	if other := decide(b, "local"); other.Token == "" {
		t.Fatalf("%+v", other)
	}
	if err := a.Extend(ctx, "local", c.Token, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := a.Complete(ctx, "local", c.Token, tool.Record{Output: "local"}); err != nil {
		t.Fatal(err)
	}

	srv.Start()
	eventually(t, "claims shared again after Redis came back", func() bool {
		c, _ := a.Claim(ctx, "probe", time.Minute)
		a.Release(ctx, "probe", c.Token)
		return strings.HasPrefix(c.Token, sharedToken)
	})
	if c, _ := a.Claim(ctx, "local", time.Minute); c.Record == nil || c.Record.Output != "local" {
		t.Fatalf("a record made while Redis was away was forgotten: %+v", c)
	}
}

// TestRecordsWithARegistry: a call made on one replica is answered from
// its record on another, and never made there.
func TestRecordsWithARegistry(t *testing.T) {
	rs := recordReplicas(t, testConfig(t, redisURL()), 2)
	calls := 0
	registries := make([]*tool.Registry, len(rs))
	for i, r := range rs {
		registries[i] = &tool.Registry{Records: r}
		registries[i].Register("send", tool.Spec{Kind: tool.SideEffects}, func(ctx context.Context, c tool.Call) (string, error) {
			calls++
			return "sent", nil
		})
	}
	call := tool.Call{ID: "toolu_1", Name: "send", Arguments: []byte(`{"to":"a"}`)}
	first := registries[0].Execute(context.Background(), call)
	again := registries[1].Execute(context.Background(), call)
	if first.Failure != nil || first.Recorded || !again.Recorded || again.Output != "sent" || calls != 1 {
		t.Fatalf("%+v, then %+v, after %d calls", first, again, calls)
	}
}

func TestNewRecordsRefusesBadConfigs(t *testing.T) {
	if _, err := NewRecords(nil, RecordsConfig{}); err == nil {
		t.Error("a nil Store was accepted")
	}
	if _, err := NewRecords(testStore(t), RecordsConfig{TTL: -time.Second}); err == nil {
		t.Error("a negative TTL was accepted")
	}
}
