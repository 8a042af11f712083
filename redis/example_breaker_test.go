package reboundredis_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/fallback"
	reboundredis "github.com/rebound-go/rebound/redis"
	"github.com/redis/go-redis/v9"
)

// Every replica of a service builds the same breaker: when one trips it,
// all of them stop calling the provider, and after the cooldown one probe
// in the whole fleet finds out whether it is back.
func ExampleNewBreaker() {
	cfg, err := reboundredis.Open("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	store, err := reboundredis.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{
		Breaker: reboundredis.NewBreaker(store, "api.openai.com", breaker.Config{}),
	}}}
	_ = client // an SDK's HTTP client
}

// Two replicas of a service, each with a fallback chain, share their
// cool-downs: the model one replica finds out of quota, the other skips
// without calling it.
func ExampleNewCooldowns() {
	cfg, err := reboundredis.Open("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	// Keys of this run only, removed when it ends. The Timeout of a
	// decision is 5 ms by default; an example may run on a busy machine.
	cfg.Prefix = fmt.Sprintf("rebound-example:%d:%d:", os.Getpid(), time.Now().UnixNano())
	cfg.Timeout = 2 * time.Second
	defer removeKeys(cfg.Client, cfg.Prefix)
	store, err := reboundredis.New(cfg)
	if err != nil {
		log.Fatal(err)
	}

	var quotaHits atomic.Int32
	outOfQuota := func(ctx context.Context, prompt string) (string, error) {
		quotaHits.Add(1)
		return "", &rebound.HTTPError{StatusCode: http.StatusTooManyRequests,
			Body: []byte(`{"error":{"type":"insufficient_quota","code":"insufficient_quota"}}`)}
	}
	answers := func(ctx context.Context, prompt string) (string, error) { return "claude-x answers", nil }
	replica := func() *fallback.Chain[string, string] {
		return &fallback.Chain[string, string]{
			Targets: []fallback.Target[string, string]{
				{Name: "gpt-x", Call: outOfQuota},
				{Name: "claude-x", Call: answers},
			},
			Cooldowns: reboundredis.NewCooldowns(store),
		}
	}
	first, second := replica(), replica()

	for _, chain := range []*fallback.Chain[string, string]{first, second} {
		res, err := chain.Do(context.Background(), "Hello?")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %s\n", res.Target, res.Value)
	}
	fmt.Println("calls to gpt-x:", quotaHits.Load())
	// Output:
	// claude-x: claude-x answers
	// claude-x: claude-x answers
	// calls to gpt-x: 1
}

// removeKeys deletes every key under prefix.
func removeKeys(c redis.UniversalClient, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	for it := c.Scan(ctx, 0, prefix+"*", 1000).Iterator(); it.Next(ctx); {
		keys = append(keys, it.Val())
	}
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
	c.Close()
}
