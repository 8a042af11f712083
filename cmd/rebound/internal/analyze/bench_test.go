package analyze

import (
	"bytes"
	"context"
	"testing"
)

// BenchmarkAnalyze reads 100 000 generated lines per iteration and reports
// the throughput in MB/s and lines/s.
func BenchmarkAnalyze(b *testing.B) {
	const lines = 100000
	var in bytes.Buffer
	if err := Generate(&in, lines, 1); err != nil {
		b.Fatal(err)
	}
	data := in.Bytes()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		a := New(Options{Priced: true, PriceIn: 2.5, PriceOut: 10})
		if _, err := a.Read(ctx, "bench", bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(lines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}
