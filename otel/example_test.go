package reboundotel_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/rebound-go/rebound"
	reboundotel "github.com/rebound-go/rebound/otel"
)

// virtualClock is a rebound.Clock whose sleeps return at once, having moved
// the time on: the example's waits take no real time.
type virtualClock struct{ now time.Time }

func (c *virtualClock) Now() time.Time { return c.now }

func (c *virtualClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return context.Cause(ctx)
}

// A call that fails twice with a 503 and then succeeds, observed with the
// OpenTelemetry SDK's manual metric reader and an in-memory span exporter.
func Example() {
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewInMemoryExporter()
	obs := reboundotel.New(reboundotel.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)),
	})

	ctx := rebound.WithClock(context.Background(), &virtualClock{now: time.Unix(0, 0)})
	ctx = rebound.WithTarget(ctx, "gpt-x:summarise")
	p := rebound.Policy{BaseDelay: 100 * time.Millisecond, Jitter: rebound.JitterNone, Observer: obs}
	calls := 0
	answer, err := rebound.Do(ctx, p, func(ctx context.Context) (string, error) {
		if calls++; calls < 3 {
			return "", &rebound.HTTPError{StatusCode: http.StatusServiceUnavailable}
		}
		return "hello", nil
	})
	fmt.Println(answer, err)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	fmt.Println("metrics:", names)

	for _, s := range spans.GetSpans() { // in the order they ended
		fmt.Printf("span %s (%v)", s.Name, s.EndTime.Sub(s.StartTime))
		for _, e := range s.Events {
			fmt.Printf(", event %s", e.Name)
		}
		fmt.Println()
	}
	// Output:
	// hello <nil>
	// metrics: [rebound.attempts rebound.call.duration rebound.retries rebound.wait.duration]
	// span rebound.attempt (0s)
	// span rebound.attempt (0s)
	// span rebound.attempt (0s)
	// span rebound.call (300ms), event rebound.wait, event rebound.wait
}

// Serving the metrics to Prometheus: OpenTelemetry's Prometheus exporter is
// a metric reader that registers with a Prometheus registry. The program in
// example/prometheus does this against a chaos server.
func Example_prometheus() {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		panic(err)
	}
	obs := reboundotel.New(reboundotel.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))})
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{Observer: obs}}}
	_ = client // make calls with it

	http.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	_ = http.ListenAndServe("127.0.0.1:9464", nil)
}
