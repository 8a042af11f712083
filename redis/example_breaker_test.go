package reboundredis_test

import (
	"context"
	"log"
	"net/http"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/fallback"
	reboundredis "github.com/rebound-go/rebound/redis"
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

// A fallback chain whose cool-downs are shared: a model one replica finds
// out of quota, every replica skips.
func ExampleNewCooldowns() {
	cfg, err := reboundredis.Open("redis://127.0.0.1:6379/0")
	if err != nil {
		log.Fatal(err)
	}
	store, err := reboundredis.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	model := func(name string) fallback.Target[string, string] {
		return fallback.Target[string, string]{Name: name, Call: func(ctx context.Context, prompt string) (string, error) {
			return name + " answers", nil // the provider's SDK, really
		}}
	}
	chain := &fallback.Chain[string, string]{
		Targets:   []fallback.Target[string, string]{model("gpt-x"), model("claude-x")},
		Cooldowns: reboundredis.NewCooldowns(store),
	}
	_, _ = chain.Do(context.Background(), "Hello?")
}
