package reboundredis

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/rebound-go/rebound/ratelimit"
)

var echo = redis.NewScript(`return ARGV[1]`)

// TestStoreGoesAwayAndComesBack: a Redis killed is away, and, started
// again, back; OnChange hears each once. (How long decisions wait for it
// is tested in virtual time: TestStoreWaitsForAStalledRedisNoLongerThanTimeout.)
func TestStoreGoesAwayAndComesBack(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	cfg.RetryEvery = 100 * time.Millisecond
	var mu sync.Mutex
	var changes []bool
	cfg.OnChange = func(up bool, err error) {
		mu.Lock()
		defer mu.Unlock()
		changes = append(changes, up)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if res, err := s.run(ctx, echo, nil, "x"); err != nil || res != "x" {
		t.Fatalf("%v %v", res, err)
	}
	srv.Stop()
	for range 3 {
		if _, err := s.run(ctx, echo, nil, "x"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("with Redis gone: %v", err)
		}
	}
	srv.Start()
	eventually(t, "decisions shared again after Redis came back", func() bool {
		_, err := s.run(ctx, echo, nil, "x")
		return err == nil
	})
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || changes[0] || !changes[1] {
		t.Errorf("OnChange heard %v, want [false true]", changes)
	}
}

func TestNewRefusesUnboundedClients(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := New(Config{Client: c}); err == nil {
		t.Error("a client that ignores its context's deadline was accepted")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	if _, err := New(Config{Client: cc}); err == nil {
		t.Error("a cluster client that ignores its context's deadline was accepted")
	}
	r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer r.Close()
	if _, err := New(Config{Client: r}); err == nil {
		t.Error("a ring that ignores its context's deadline was accepted")
	}
	if _, err := New(Config{}); err == nil {
		t.Error("no client was accepted")
	}
}

var write = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)

// TestRedisThatCannotServeIsAway: a Redis out of memory answers, but a
// decision that writes cannot be made there: it is away, as a dead one is.
func TestRedisThatCannotServeIsAway(t *testing.T) {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	var downs atomic.Int32
	cfg.OnChange = func(up bool, err error) {
		if !up {
			downs.Add(1)
		}
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := cfg.Client.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Client.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.run(ctx, write, []string{s.key("k")}, "v"); !errors.Is(err, ErrUnavailable) || downs.Load() != 1 {
		t.Errorf("a Redis out of memory: %v, %d reports of it gone", err, downs.Load())
	}
}

// flapping answers every command itself, without a server: with an error
// that is not Redis's own half the time, at random, while flap is set.
type flapping struct{ flap *atomic.Bool }

func (f flapping) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f flapping) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (f flapping) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if f.flap.Load() && rand.IntN(2) == 0 {
			err := errors.New("i/o timeout (simulated)")
			cmd.SetErr(err)
			return err
		}
		if c, ok := cmd.(*redis.Cmd); ok {
			c.SetVal("x")
		}
		return nil
	}
}

// TestOnChangeEndsOnTheTruth: under a Redis that flaps while decisions
// run, OnChange's last word is the Store's state once Redis is steady.
func TestOnChangeEndsOnTheTruth(t *testing.T) {
	for round := range 2000 {
		var flap atomic.Bool
		flap.Store(true)
		c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
		c.AddHook(flapping{&flap})
		var mu sync.Mutex
		var last *bool
		s, err := New(Config{Client: c, RetryEvery: time.Nanosecond, OnChange: func(up bool, err error) {
			mu.Lock()
			defer mu.Unlock()
			last = &up
		}})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 3 {
					s.run(context.Background(), echo, nil, "x")
				}
			})
		}
		wg.Wait()
		flap.Store(false)
		for range 3 {
			if _, err := s.run(context.Background(), echo, nil, "x"); err != nil {
				t.Fatalf("round %d: a steady Redis: %v", round, err)
			}
		}
		c.Close()
		mu.Lock()
		if last != nil && !*last {
			t.Fatalf("round %d: Redis answers, but the last word OnChange heard was that it is away", round)
		}
		mu.Unlock()
	}
}

// evals counts the scripts a client sends whole (EVAL), as it does for a
// script Redis has not loaded.
type evals struct{ n atomic.Int64 }

func (e *evals) DialHook(next redis.DialHook) redis.DialHook { return next }
func (e *evals) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (e *evals) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "eval" {
			e.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// TestWarmReadiesTheFirstDecisions starts as a batch does: the pool's worth
// of workers make their first decisions at once, on a store just opened
// and pinged. Without Warm, each of them dials and shakes hands with
// Redis, and sends its script whole, within its decision's Timeout (a few
// milliseconds), and Redis, local and idle, is taken for away. With it,
// no first decision opens a connection or sends a script whole. (A
// redis-server of the test's own: its scripts are not loaded yet.)
func TestWarmReadiesTheFirstDecisions(t *testing.T) {
	srv := startRedis(t)
	for run := range 5 {
		cfg := testConfig(t, srv.URL()) // has pinged: one connection is open
		var sent evals
		cfg.Client.AddHook(&sent)
		cfg.Client.ScriptFlush(context.Background())
		var away atomic.Pointer[error]
		cfg.OnChange = func(up bool, err error) {
			if !up {
				away.CompareAndSwap(nil, &err)
			}
		}
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = s.Warm(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		size := cfg.Client.(*redis.Client).Options().PoolSize
		dials := cfg.Client.PoolStats().Misses
		l := NewLimiter(s, "first", ratelimit.Config{RequestsPerMinute: 6000})
		start := make(chan struct{})
		var wg sync.WaitGroup
		for range size {
			wg.Go(func() {
				<-start
				l.decide(context.Background(), "wait", 1, -1)
			})
		}
		close(start)
		wg.Wait()
		if n := cfg.Client.PoolStats().Misses - dials; n > 0 {
			t.Errorf("run %d: %d of %d first decisions opened a connection", run, n, size)
		}
		if n := sent.n.Load(); n > 0 {
			t.Errorf("run %d: %d of %d first decisions sent their script whole", run, n, size)
		}
		if err := away.Load(); err != nil {
			t.Fatalf("run %d: a first decision took Redis for away: %v", run, *err)
		}
	}
}

// TestOpenLeavesMaintenanceNotificationsOff: Open's client sends nothing
// more on a new connection than a decision needs (go-redis's maintenance
// notifications race when Warm opens connections at once).
func TestOpenLeavesMaintenanceNotificationsOff(t *testing.T) {
	cfg, err := Open(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Client.(*redis.Client).Close()
	if m := cfg.Client.(*redis.Client).Options().MaintNotificationsConfig; m == nil || m.Mode != maintnotifications.ModeDisabled {
		t.Errorf("maintenance notifications %+v; want disabled", m)
	}
}
