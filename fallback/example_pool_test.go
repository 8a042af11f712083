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

// Three keys of one provider, as a pool that keeps conversations: each
// turn of one conversation goes to the same key, the one that holds the
// provider's prompt cache of it, for as long as that key can take it.
func Example_poolConversation() {
	chain := &fallback.Chain[string, string]{
		Conversation: func(conversation string) string { return conversation },
	}
	for _, name := range []string{"key-1", "key-2", "key-3"} {
		chain.Targets = append(chain.Targets, fallback.Target[string, string]{
			Name: name, Pool: "provider", Policy: rebound.Policy{MaxAttempts: 1},
			Affinity: "hash-of-" + name, // the same on every replica; never the key itself
			Call: func(_ context.Context, conversation string) (string, error) {
				return name, nil
			},
		})
	}
	for range 3 {
		res, _ := chain.Do(context.Background(), "task-7")
		fmt.Println("task-7 on", res.Value)
	}
	// Output:
	// task-7 on key-3
	// task-7 on key-3
	// task-7 on key-3
}
