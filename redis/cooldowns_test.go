package reboundredis

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/fallback"
)

func TestCooldownsShared(t *testing.T) {
	cfg := testConfig(t, redisURL())
	var cs [2]*Cooldowns
	for i := range cs {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cs[i] = NewCooldowns(s)
	}
	ctx, now := t.Context(), time.Now()
	cs[0].Start(ctx, "gpt-x", now, time.Hour)
	if !cs[1].Cooling(ctx, "gpt-x", now) || cs[1].Cooling(ctx, "gpt-y", now) {
		t.Fatal("another replica does not see the cool-down")
	}
	left := cfg.Client.PTTL(ctx, cs[0].store.key("cooldown", "gpt-x")).Val()
	if left < time.Hour-time.Since(now)-time.Millisecond || left > time.Hour {
		t.Errorf("the cool-down ends in %v, %v after it started; want an hour after", left, time.Since(now))
	}
	// What a replica has learnt it answers without asking: the key gone
	// (as if Redis had been emptied), it still knows.
	cfg.Client.Del(ctx, cs[0].store.key("cooldown", "gpt-x"))
	if !cs[1].Cooling(ctx, "gpt-x", now) {
		t.Error("a known cool-down was forgotten")
	}
	if cs[1].Cooling(ctx, "gpt-x", now.Add(time.Hour)) {
		t.Error("a known cool-down outlived its end")
	}
	cs[0].Start(ctx, "gpt-z", now, 0) // nothing to start
	if cs[1].Cooling(ctx, "gpt-z", now) {
		t.Error("a cool-down of no time started")
	}
}

// While Redis is away, the cool-downs a replica started itself still hold
// there. (How long a decision waits for Redis:
// TestEveryPartWaitsForAStalledRedisNoLongerThanTimeout.)
func TestCooldownsLocalWhileRedisAway(t *testing.T) {
	srv := startRedis(t)
	s, err := New(testConfig(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	c := NewCooldowns(s)
	ctx, now := t.Context(), time.Now()
	srv.Stop()
	c.Start(ctx, "gpt-x", now, time.Hour)
	if !c.Cooling(ctx, "gpt-x", now) || c.Cooling(ctx, "gpt-y", now) {
		t.Error("with Redis away: want gpt-x, and only it, cooling down")
	}
	if !s.down.Load() {
		t.Error("the store did not find Redis away")
	}
}

func init() { children["cooldowns"] = cooldownsChild }

// cooldownsChild runs a chain of targets a and b. Child 0 finds a out of
// quota; child 1's next call, once it has, must skip a.
func cooldownsChild(args []string) error {
	s, c, err := childStore(args)
	if err != nil {
		return err
	}
	me := childArg(args, "child")
	target := func(name string) fallback.Target[string, string] {
		return fallback.Target[string, string]{Name: name, Policy: rebound.Policy{MaxAttempts: 1},
			Call: func(ctx context.Context, _ string) (string, error) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, childArg(args, "upstream")+"/"+name+"?child="+me, nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return "", err
				}
				if resp.StatusCode != http.StatusOK {
					return "", rebound.NewHTTPError(resp)
				}
				resp.Body.Close()
				return name, nil
			}}
	}
	chain := &fallback.Chain[string, string]{Targets: []fallback.Target[string, string]{target("a"), target("b")},
		Cooldowns: NewCooldowns(s), QuotaCooldown: time.Minute}
	if me == "1" {
		if err := await(c, s, "found", 1); err != nil {
			return err
		}
	}
	res, err := chain.Do(context.Background(), "prompt")
	if err != nil {
		return err
	}
	var steps []string
	for _, st := range res.Trail {
		switch {
		case st.Skipped != "":
			steps = append(steps, st.Target+" skipped: "+st.Skipped)
		case st.Err != nil:
			steps = append(steps, st.Target+" "+st.Verdict.Kind.String())
		default:
			steps = append(steps, st.Target+" ok")
		}
	}
	fmt.Println(strings.Join(steps, ", "))
	if me == "0" {
		return signal(c, s, "found", 1)
	}
	return nil
}

// A target one process found out of quota is skipped by another
// process's chain on its next call, without a request.
func TestCooldownsAcrossProcesses(t *testing.T) {
	cfg := testConfig(t, redisURL())
	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/a" {
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(`{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`))
		}
	}))
	defer upstream.Close()
	out := runChildren(t, 2, "cooldowns", 30*time.Second,
		"redis="+redisURL(), "prefix="+cfg.Prefix, "upstream="+upstream.URL)
	want := [][]string{{"a quota_exhausted, b ok"}, {"a skipped: quota exhausted, b ok"}}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Errorf("the chains' trails: %q; want %q", out, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if seen["/a"] != 1 || seen["/b"] != 2 {
		t.Errorf("requests: %v; want a once, b twice", seen)
	}
}

func TestNewCooldownsNilStore(t *testing.T) {
	defer func() {
		if r := recover(); r != "reboundredis: NewCooldowns: the Store is nil" {
			t.Errorf("recovered %v", r)
		}
	}()
	NewCooldowns(nil)
}
