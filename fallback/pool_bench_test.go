package fallback_test

import (
	"context"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/fallback"
)

// benchmarkChain runs a chain of three targets, each answering at once,
// pooled or not, its calls of a conversation or not: what ordering a
// pool by headroom, or by conversation, costs a call.
func benchmarkChain(b *testing.B, pool, conversation string) {
	ch := &fallback.Chain[int, int]{LastResort: true}
	if conversation != "" {
		ch.Conversation = func(int) string { return conversation }
	}
	for i, h := range []float64{0.2, 0.9, 0.5} {
		name := string(rune('A' + i))
		ch.Targets = append(ch.Targets, fallback.Target[int, int]{
			Name: name, Policy: rebound.Policy{MaxAttempts: 1}, Pool: pool, Affinity: "id-" + name,
			Headroom: func() float64 { return h },
			Call:     func(context.Context, int) (int, error) { return i, nil },
		})
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ch.Do(ctx, 1); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkChainThreeTargets(b *testing.B)       { benchmarkChain(b, "", "") }
func BenchmarkChainThreeTargetsPooled(b *testing.B) { benchmarkChain(b, "keys", "") }
func BenchmarkChainThreeTargetsPooledConversation(b *testing.B) {
	benchmarkChain(b, "keys", "5c1d0e7a9b3f2468")
}
