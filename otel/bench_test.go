package reboundotel_test

import (
	"context"
	"errors"
	"testing"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/rebound-go/rebound"
	reboundotel "github.com/rebound-go/rebound/otel"
)

var errFlaky = errors.New("flaky")

// BenchmarkDo measures what the Observer adds to a call through rebound.Do:
// one that succeeds at once, and one whose first two attempts fail (no
// waits). "none" has no observer; "func" an empty ObserverFunc (what
// rebound itself spends on events: clock readings); "noop" has the OpenTelemetry API's no-op
// providers (the globals before an SDK is installed); "sdk" records into
// the SDK, every span sampled, with a manual reader and no span exporter.
func BenchmarkDo(b *testing.B) {
	observers := []struct {
		name string
		obs  rebound.Observer
	}{
		{"none", nil},
		{"func", rebound.ObserverFunc(func(rebound.Event) {})},
		{"noop", reboundotel.New(reboundotel.Config{MeterProvider: metricnoop.NewMeterProvider(), TracerProvider: tracenoop.NewTracerProvider()})},
		{"sdk", reboundotel.New(reboundotel.Config{
			MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())),
			TracerProvider: sdktrace.NewTracerProvider(),
		})},
	}
	ctx := rebound.WithTarget(context.Background(), "gpt-x:summarise")
	for _, failures := range []int{0, 2} {
		for _, o := range observers {
			name := "ok/" + o.name
			if failures > 0 {
				name = "retried/" + o.name
			}
			b.Run(name, func(b *testing.B) {
				p := rebound.Policy{BaseDelay: rebound.NoDelay, Observer: o.obs}
				b.ReportAllocs()
				for b.Loop() {
					n := 0
					_, err := rebound.Do(ctx, p, func(context.Context) (int, error) {
						if n++; n <= failures {
							return 0, errFlaky
						}
						return n, nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
