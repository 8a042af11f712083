package reboundbolt

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/rebound-go/rebound/batch"
)

// BenchmarkJournal runs the journal as rebound batch does: one dispatcher
// claims up to 64 items at a time and hands each to one of 64 workers,
// which record its outcome (a body of about 600 bytes) alone. An
// iteration is a whole batch of 100 000 items; Prepare is not timed.
func BenchmarkJournal(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) { benchJournal(b, Config{Sync: sync}) })
	}
}

func benchJournal(b *testing.B, cfg Config) {
	const items, workers = 100_000, 64
	ctx := context.Background()
	in := batch.Input{Digest: "bench"}
	for i := range items {
		in.IDs = append(in.IDs, fmt.Sprintf("request-%06d", i))
	}
	body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"` +
		strings.Repeat("lorem ipsum ", 40) + `"},"finish_reason":"stop"}]}`) // ~600 bytes
	b.ReportAllocs()
	var (
		elapsed time.Duration
		commits int
	)
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		j, err := Open(filepath.Join(b.TempDir(), fmt.Sprintf("%d.journal", i)), cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := j.Prepare(ctx, in, batch.Options{}); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		b.StartTimer()
		work := make(chan string, workers)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for id := range work {
					o := batch.Outcome{ID: id, State: batch.Succeeded, StatusCode: 200, RequestID: "req_" + id, Body: body, Attempts: 1}
					if err := j.Record(ctx, []batch.Outcome{o}); err != nil {
						b.Error(err)
					}
				}
			})
		}
		n := 0
		for {
			claims, err := j.Claim(ctx, workers)
			if err != nil {
				b.Fatal(err)
			}
			if len(claims) == 0 {
				break
			}
			for _, c := range claims {
				work <- c.ID
			}
			n += len(claims)
		}
		close(work)
		wg.Wait()
		b.StopTimer()
		elapsed += time.Since(start)
		if n != items {
			b.Fatalf("claimed %d items, want %d", n, items)
		}
		if err := j.Close(); err != nil {
			b.Fatal(err)
		}
		commits += j.w.commits // the writer has returned
		b.StartTimer()
	}
	b.ReportMetric(float64(items*b.N)/elapsed.Seconds(), "items/s")
	b.ReportMetric(float64(items*b.N)/float64(commits), "items/commit")
}

// BenchmarkOpen opens a journal of 100 000 answered items of 600 bytes
// for a run, and closes it: "journal" is Open, which checks every page
// before bbolt reads it; "bbolt" is bbolt's own opening of the file alone,
// which walks the same tree, to compare.
func BenchmarkOpen(b *testing.B) {
	const items = 100_000
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "open.journal")
	j, err := Open(path, Config{})
	if err != nil {
		b.Fatal(err)
	}
	in := batch.Input{Digest: "bench"}
	for i := range items {
		in.IDs = append(in.IDs, fmt.Sprintf("request-%06d", i))
	}
	if err := j.Prepare(ctx, in, batch.Options{}); err != nil {
		b.Fatal(err)
	}
	body := []byte(strings.Repeat("lorem ipsum ", 50))
	for {
		claims, err := j.Claim(ctx, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if len(claims) == 0 {
			break
		}
		outcomes := make([]batch.Outcome, len(claims))
		for i, c := range claims {
			outcomes[i] = batch.Outcome{ID: c.ID, State: batch.Succeeded, StatusCode: 200, Body: body}
		}
		if err := j.Record(ctx, outcomes); err != nil {
			b.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run("journal", func(b *testing.B) {
		for b.Loop() {
			j, err := Open(path, Config{})
			if err != nil {
				b.Fatal(err)
			}
			j.Close()
		}
	})
	b.Run("bbolt", func(b *testing.B) {
		for b.Loop() {
			db, err := bolt.Open(path, 0o600, boltOptions(Config{}, time.Second, false))
			if err != nil {
				b.Fatal(err)
			}
			db.Close()
		}
	})
}
