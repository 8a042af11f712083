package peers

import (
	"context"
	"errors"
	"testing"

	"github.com/avast/retry-go/v4"
	"github.com/cenkalti/backoff/v5"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"

	"github.com/rebound-go/rebound"
)

var errFlaky = errors.New("flaky")

// flaky fails twice with a plain error and succeeds on every third call;
// attempts counts every call so each benchmark can check it made three.
type flaky struct{ attempts int }

func (f *flaky) call() (int, error) {
	f.attempts++
	if f.attempts%3 != 0 {
		return 0, errFlaky
	}
	return 1, nil
}

func check(b *testing.B, f *flaky, calls int) {
	b.Helper()
	if f.attempts != 3*calls {
		b.Fatalf("%d attempts for %d calls, want 3 each", f.attempts, calls)
	}
}

func ok() (int, error) { return 1, nil }

func BenchmarkSuccess(b *testing.B) {
	ctx := context.Background()
	b.Run("rebound", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = rebound.Do(ctx, rebound.Policy{}, func(context.Context) (int, error) { return ok() })
		}
	})
	b.Run("cenkalti-backoff-v5", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = backoff.Retry(ctx, ok)
		}
	})
	b.Run("retry-go-v4", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = retry.DoWithData(ok, retry.Context(ctx))
		}
	})
	b.Run("failsafe-go", func(b *testing.B) {
		rp := retrypolicy.NewBuilder[int]().Build()
		b.ReportAllocs()
		for b.Loop() {
			_, _ = failsafe.With(rp).WithContext(ctx).Get(ok)
		}
	})
}

func BenchmarkThirdAttempt(b *testing.B) {
	ctx := context.Background()
	b.Run("rebound", func(b *testing.B) {
		f := &flaky{}
		p := rebound.Policy{BaseDelay: rebound.NoDelay}
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			if _, err := rebound.Do(ctx, p, func(context.Context) (int, error) { return f.call() }); err != nil {
				b.Fatal(err)
			}
			n++
		}
		check(b, f, n)
	})
	b.Run("cenkalti-backoff-v5", func(b *testing.B) {
		f := &flaky{}
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			if _, err := backoff.Retry(ctx, f.call, backoff.WithBackOff(&backoff.ZeroBackOff{}), backoff.WithMaxTries(3)); err != nil {
				b.Fatal(err)
			}
			n++
		}
		check(b, f, n)
	})
	b.Run("retry-go-v4", func(b *testing.B) {
		f := &flaky{}
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			// A zero max jitter panics in retry-go v4.7.0: a fixed zero delay it is.
			if _, err := retry.DoWithData(f.call, retry.Context(ctx), retry.Attempts(3), retry.Delay(0),
				retry.DelayType(retry.FixedDelay)); err != nil {
				b.Fatal(err)
			}
			n++
		}
		check(b, f, n)
	})
	b.Run("failsafe-go", func(b *testing.B) {
		f := &flaky{}
		rp := retrypolicy.NewBuilder[int]().WithMaxAttempts(3).WithDelay(0).Build()
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			if _, err := failsafe.With(rp).WithContext(ctx).Get(f.call); err != nil {
				b.Fatal(err)
			}
			n++
		}
		check(b, f, n)
	})
}
