package peers

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/ratelimit"
	reboundredis "github.com/rebound-go/rebound/redis"
)

// The shared limiter's decisions against the Redis of the tests
// (REBOUND_REDIS_URL, else 127.0.0.1:6379), beside go-redis/redis_rate,
// the GCRA reference on Redis, in the same run. Both are given a limit no
// benchmark reaches, so that every decision is an allowed one, which
// writes; each counts the commands its client sends and fails unless a
// decision is one round trip.

func redisURL() string {
	if u := os.Getenv("REBOUND_REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// commands counts the commands a client sends, but for those that set up
// a new connection (HELLO, CLIENT SETINFO): they are the pool's, not a
// decision's.
type commands struct{ n atomic.Int64 }

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.count(cmd)
		return next(ctx, cmd)
	}
}
func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *commands) count(cmd redis.Cmder) {
	if n := cmd.Name(); n != "hello" && n != "client" {
		c.n.Add(1)
	}
}

// decider makes one decision, and says whether the call may go.
type decider func() (bool, error)

// newRebound returns a reboundredis.Limiter's Allow on a key of its own.
func newRebound(b *testing.B, cfg ratelimit.Config) (decider, *commands) {
	rc, err := reboundredis.Open(redisURL())
	if err != nil {
		b.Fatal(err)
	}
	rc.Prefix = fmt.Sprintf("rebound-bench:%d:%d:", os.Getpid(), time.Now().UnixNano())
	rc.Timeout = time.Second // a benchmark measures Redis, never the local fallback
	rc.OnChange = func(up bool, err error) { b.Errorf("Redis went away: %v", err) }
	cleanup(b, rc.Client, rc.Prefix)
	s, err := reboundredis.New(rc)
	if err != nil {
		b.Fatal(err)
	}
	l := reboundredis.NewLimiter(s, "model", cfg)
	c := &commands{}
	rc.Client.AddHook(c)
	return func() (bool, error) { return l.Allow(1), nil }, c
}

// newRedisRate returns redis_rate's Allow, on a client with the options
// reboundredis.Open gives, on a key of its own.
func newRedisRate(b *testing.B) (decider, *commands) {
	rc, err := reboundredis.Open(redisURL())
	if err != nil {
		b.Fatal(err)
	}
	key := fmt.Sprintf("rebound-bench:%d:%d", os.Getpid(), time.Now().UnixNano())
	cleanup(b, rc.Client, "rate:"+key) // redis_rate's own prefix
	l := redis_rate.NewLimiter(rc.Client)
	limit := redis_rate.Limit{Rate: 1 << 40, Burst: 1 << 30, Period: time.Minute}
	c := &commands{}
	rc.Client.AddHook(c)
	ctx := context.Background()
	return func() (bool, error) {
		res, err := l.Allow(ctx, key, limit)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	}, c
}

func cleanup(b *testing.B, c redis.UniversalClient, prefix string) {
	b.Cleanup(func() {
		ctx := context.Background()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
}

// measure runs decide b.N times, on one goroutine or on parallel ones,
// and checks that each decision allowed its call in one round trip.
func measure(b *testing.B, decide decider, sent *commands, parallel bool) {
	if ok, err := decide(); !ok || err != nil { // loads the script, dials
		b.Fatalf("the first decision: %v %v", ok, err)
	}
	sent.n.Store(0)
	var decisions atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	one := func() bool {
		ok, err := decide()
		if err != nil || !ok {
			b.Errorf("a decision: %v %v", ok, err)
			return false
		}
		decisions.Add(1)
		return true
	}
	if parallel {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() && one() {
			}
		})
	} else {
		for i := 0; i < b.N && one(); i++ {
		}
	}
	b.StopTimer()
	if n := decisions.Load(); sent.n.Load() != n {
		b.Fatalf("%d commands for %d decisions, want one each", sent.n.Load(), n)
	}
	b.ReportMetric(float64(sent.n.Load())/float64(b.N), "cmds/op")
}

var huge = ratelimit.Config{RequestsPerMinute: 1e15}

// BenchmarkSharedLimit is one decision at a time: the round trip's
// latency.
func BenchmarkSharedLimit(b *testing.B) {
	b.Run("rebound", func(b *testing.B) {
		d, c := newRebound(b, huge)
		measure(b, d, c, false)
	})
	b.Run("rebound-with-tokens", func(b *testing.B) {
		d, c := newRebound(b, ratelimit.Config{RequestsPerMinute: 1e15, TokensPerMinute: 1e18})
		measure(b, d, c, false)
	})
	b.Run("go-redis-redis_rate-v10", func(b *testing.B) {
		d, c := newRedisRate(b)
		measure(b, d, c, false)
	})
}

// BenchmarkSharedLimitParallel is many goroutines deciding at once, as
// an agent service's calls do: the throughput of one Redis connection
// pool.
func BenchmarkSharedLimitParallel(b *testing.B) {
	b.Run("rebound", func(b *testing.B) {
		d, c := newRebound(b, huge)
		b.SetParallelism(8)
		measure(b, d, c, true)
	})
	b.Run("rebound-with-tokens", func(b *testing.B) {
		d, c := newRebound(b, ratelimit.Config{RequestsPerMinute: 1e15, TokensPerMinute: 1e18})
		b.SetParallelism(8)
		measure(b, d, c, true)
	})
	b.Run("go-redis-redis_rate-v10", func(b *testing.B) {
		d, c := newRedisRate(b)
		b.SetParallelism(8)
		measure(b, d, c, true)
	})
}
