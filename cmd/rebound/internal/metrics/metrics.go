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
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	reboundotel "github.com/rebound-go/rebound/otel"
	"github.com/rebound-go/rebound/proxy"
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

// Figures adds a server's own series to the metrics: those of series,
// each observed at every read of /metrics from what figures yields then,
// so that a server's figures (the proxy's tenants and caches) and
// rebound's events reach Prometheus through one exporter.
func (m *Metrics) Figures(series []proxy.Series, figures func(yield func(proxy.Figure) bool)) error {
	meter := m.provider.Meter("github.com/rebound-go/rebound/proxy")
	instruments := make([]metric.Float64Observable, len(series))
	for i, s := range series {
		var err error
		if s.Gauge {
			instruments[i], err = meter.Float64ObservableGauge(s.Name, metric.WithDescription(s.Description))
		} else {
			instruments[i], err = meter.Float64ObservableCounter(s.Name, metric.WithDescription(s.Description))
		}
		if err != nil {
			return err
		}
	}
	observables := make([]metric.Observable, len(instruments))
	for i, in := range instruments {
		observables[i] = in
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		var attrs []attribute.KeyValue
		for f := range figures {
			attrs = attrs[:0]
			for _, l := range f.Labels {
				attrs = append(attrs, attribute.String(l.Key, l.Value))
			}
			o.ObserveFloat64(instruments[f.Series], f.Value, metric.WithAttributes(attrs...))
		}
		return nil
	}, observables...)
	return err
}

// Close stops the recording.
func (m *Metrics) Close() error { return m.provider.Shutdown(context.Background()) }
