package analyze

import (
	"bytes"
	"context"
	"fmt"
	"testing"
)

// BenchmarkAnalyze reads 100 000 generated lines per iteration and reports
// the throughput in MB/s and lines/s.
func BenchmarkAnalyze(b *testing.B) {
	var in bytes.Buffer
	if err := Generate(&in, benchLines, 1); err != nil {
		b.Fatal(err)
	}
	benchmarkRead(b, in.Bytes())
}

// BenchmarkAnalyzeCaps reads the same lines, each naming one of 2 000
// runs and 20 tenants and the run's cap.
func BenchmarkAnalyzeCaps(b *testing.B) {
	var in bytes.Buffer
	if err := Generate(&in, benchLines, 1); err != nil {
		b.Fatal(err)
	}
	var data []byte
	i := 0
	for line := range bytes.Lines(in.Bytes()) {
		data = fmt.Appendf(data, `{"run":"run-%d","tenant":"tenant-%d","run_cap_usd":5,`, i/50, i%20)
		data = append(data, line[1:]...)
		i++
	}
	benchmarkRead(b, data)
}

const benchLines = 100000

func benchmarkRead(b *testing.B, data []byte) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	ctx := context.Background()
	for b.Loop() {
		a := New(Options{Priced: true, PriceIn: 2.5, PriceOut: 10})
		if _, err := a.Read(ctx, "bench", bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(benchLines)*float64(b.N)/b.Elapsed().Seconds(), "lines/s")
}
