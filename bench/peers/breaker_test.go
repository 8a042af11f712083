package peers

import (
	"testing"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/sony/gobreaker/v2"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
)

// BenchmarkBreakerClosed is the path every call takes while the target is
// healthy: ask the breaker, make the call, report success. All goroutines
// share one breaker, as an agent's calls to one model do.
func BenchmarkBreakerClosed(b *testing.B) {
	b.Run("rebound", func(b *testing.B) {
		cb := breaker.New("m", breaker.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := cb.Allow()
				if err != nil {
					b.Error(err)
					return
				}
				_, err = ok()
				cb.Done(p, rebound.OutcomeOf(err, rebound.Verdict{}))
			}
		})
	})
	b.Run("sony-gobreaker-v2", func(b *testing.B) {
		cb := gobreaker.NewCircuitBreaker[int](gobreaker.Settings{Name: "m"})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := cb.Execute(ok); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("failsafe-go", func(b *testing.B) {
		cb := circuitbreaker.NewWithDefaults[int]()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := failsafe.With[int](cb).Get(ok); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
