package fallback_test

import (
	"context"
	"fmt"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/fallback"
)

// Three keys of one provider, as a pool: each call goes first to the key
// with the most headroom left (here fixed; a ratelimit.Limiter's Headroom
// in practice), and a rate-limited answer on one would move it on to the
// next at once.
func Example_pool() {
	headroom := map[string]float64{"key-1": 0.1, "key-2": 0.7, "key-3": 0.4}
	chain := &fallback.Chain[string, string]{}
	for _, name := range []string{"key-1", "key-2", "key-3"} {
		chain.Targets = append(chain.Targets, fallback.Target[string, string]{
			Name: name, Pool: "provider", Policy: rebound.Policy{MaxAttempts: 1},
			Headroom: func() float64 { return headroom[name] },
			Call: func(_ context.Context, prompt string) (string, error) {
				return name + " answered " + prompt, nil
			},
		})
	}
	res, _ := chain.Do(context.Background(), "hello")
	fmt.Println(res.Value)
	// Output: key-2 answered hello
}
