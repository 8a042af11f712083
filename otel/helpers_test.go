package reboundotel_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	reboundotel "github.com/rebound-go/rebound/otel"
)

// harness is an Observer recording into a manual metric reader and an
// in-memory span exporter, both synchronous.
type harness struct {
	obs    *reboundotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
}

func newHarness(t testing.TB) *harness {
	t.Helper()
	h := &harness{reader: sdkmetric.NewManualReader(), spans: tracetest.NewInMemoryExporter()}
	h.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(h.spans))
	h.obs = reboundotel.New(reboundotel.Config{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader)),
		TracerProvider: h.tp,
	})
	return h
}

// metrics collects what the reader holds, by instrument name.
func (h *harness) metrics(t testing.TB) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := h.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != reboundotel.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// point is one data point of any instrument: its attributes and its value
// (a sum, a gauge's value, or a histogram's count and sum).
type point struct {
	attrs attribute.Set
	value float64
	count uint64
}

func points(m metricdata.Metrics) []point {
	var out []point
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: float64(p.Value)})
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: p.Value})
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: float64(p.Value)})
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: p.Value})
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: p.Sum, count: p.Count})
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			out = append(out, point{attrs: p.Attributes, value: float64(p.Sum), count: p.Count})
		}
	}
	return out
}

// value returns the data point of m whose attributes are exactly want,
// and whether there is one.
func value(ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) (point, bool) {
	set := attribute.NewSet(want...)
	for _, p := range points(ms[name]) {
		if p.attrs.Equals(&set) {
			return p, true
		}
	}
	return point{}, false
}

func mustValue(t testing.TB, ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) point {
	t.Helper()
	p, ok := value(ms, name, want...)
	if !ok {
		t.Fatalf("%s: no point with %v; have %v", name, want, points(ms[name]))
	}
	return p
}

// attr returns the span attribute k, and whether there is one.
func attr(kv []attribute.KeyValue, k string) (attribute.Value, bool) {
	for _, a := range kv {
		if string(a.Key) == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}
