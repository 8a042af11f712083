package rebound_test

import (
	"context"
	"iter"
	"testing"

	"github.com/rebound-go/rebound"
)

// BenchmarkStream: the cost of a 100-event stream read through Stream,
// per event, beside ranging over the stream itself.
func BenchmarkStream(b *testing.B) {
	open := func(context.Context) iter.Seq2[int, error] {
		return func(yield func(int, error) bool) {
			for i := range 100 {
				if !yield(i, nil) {
					return
				}
			}
		}
	}
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, err := range open(ctx) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("rebound", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, err := range rebound.Stream(ctx, rebound.Policy{}, open, nil) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
