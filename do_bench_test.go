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

// TestDoAllocations holds the benchmarks' allocation figures as a test:
// neither a call that succeeds at once nor one that succeeds on its third
// attempt with zero delay allocates.
func TestDoAllocations(t *testing.T) {
	ctx := context.Background()
	ok := func(context.Context) (int, error) { return 1, nil }
	if n := testing.AllocsPerRun(1000, func() { _, _ = rebound.Do(ctx, rebound.Policy{}, ok) }); n != 0 {
		t.Errorf("success at once: %v allocations, want 0", n)
	}
	calls := 0
	flaky := func(context.Context) (int, error) {
		calls++
		if calls%3 != 0 {
			return 0, errFlaky
		}
		return 1, nil
	}
	p := rebound.Policy{BaseDelay: rebound.NoDelay}
	if n := testing.AllocsPerRun(1000, func() { _, _ = rebound.Do(ctx, p, flaky) }); n != 0 {
		t.Errorf("success on the third attempt: %v allocations, want 0", n)
	}
	if calls != 3*1001 {
		t.Errorf("%d attempts, want 3 per call", calls)
	}
}
