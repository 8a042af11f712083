package rebound_test

import (
	"context"
	"errors"
	"testing"

	"github.com/rebound-go/rebound"
)

var errFlaky = errors.New("flaky")

// BenchmarkDoSuccess is a call that succeeds at once: the cost rebound adds
// to every call that needs no retry.
func BenchmarkDoSuccess(b *testing.B) {
	ctx := context.Background()
	fn := func(context.Context) (int, error) { return 1, nil }
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rebound.Do(ctx, rebound.Policy{}, fn); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoThirdAttempt is a call that fails twice with a plain error and
// succeeds on the third attempt, with zero delay.
func BenchmarkDoThirdAttempt(b *testing.B) {
	ctx := context.Background()
	p := rebound.Policy{BaseDelay: rebound.NoDelay}
	calls := 0
	fn := func(context.Context) (int, error) {
		calls++
		if calls%3 != 0 {
			return 0, errFlaky
		}
		return 1, nil
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if _, err := rebound.Do(ctx, p, fn); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if calls != 3*n {
		b.Fatalf("%d attempts for %d calls, want 3 each", calls, n)
	}
}
