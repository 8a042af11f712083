// Package metrics is the command's /metrics: rebound's OpenTelemetry
// observer (the otel module) read by Prometheus through OpenTelemetry's
// exporter, the same for every server of the command that has metrics
// ("rebound proxy", "rebound mcp --addr"), so that their series are named
// alike.
package metrics

import (
	"context"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	reboundotel "github.com/rebound-go/rebound/otel"
)

// Metrics are a server's: what records them and what serves them.
type Metrics struct {
	// Observer records rebound's events (calls, retries, restarts,
	// breakers) as OpenTelemetry metrics.
	Observer *reboundotel.Observer
	// Handler serves them as Prometheus text.
	Handler  http.Handler
	provider *sdkmetric.MeterProvider
}

// New returns metrics read from a registry of their own.
func New() (*Metrics, error) {
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	return &Metrics{
		Observer: reboundotel.New(reboundotel.Config{MeterProvider: provider}),
		Handler:  promhttp.HandlerFor(registry, promhttp.HandlerOpts{}),
		provider: provider,
	}, nil
}

// Close stops the recording.
func (m *Metrics) Close() error { return m.provider.Shutdown(context.Background()) }
