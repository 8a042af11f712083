package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound/batch"
	"github.com/rebound-go/rebound/cmd/rebound/internal/batchrun"
	reboundpg "github.com/rebound-go/rebound/postgres"
)

// timedJournal measures the time a run spends in its journal's Claim and
// Record: the journal's cost on the path of every request.
type timedJournal struct {
	batch.Journal
	spent atomic.Int64 // nanoseconds
}

func (j *timedJournal) Claim(ctx context.Context, n int) ([]batch.Claim, error) {
	defer j.since(time.Now())
	return j.Journal.Claim(ctx, n)
}

func (j *timedJournal) Record(ctx context.Context, o []batch.Outcome) error {
	defer j.since(time.Now())
	return j.Journal.Record(ctx, o)
}

func (j *timedJournal) since(t time.Time) { j.spent.Add(int64(time.Since(t))) }

// noJournal hands out a batch's items once each and keeps nothing: the
// baseline that shows what a real journal costs.
type noJournal struct {
	mu   sync.Mutex // guards ids
	ids  []string
	done atomic.Int64
}

func (j *noJournal) Prepare(_ context.Context, in batch.Input, _ batch.Options) error {
	j.ids = in.IDs
	return nil
}

func (j *noJournal) Claim(_ context.Context, n int) ([]batch.Claim, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	n = min(n, len(j.ids))
	claims := make([]batch.Claim, n)
	for i, id := range j.ids[:n] {
		claims[i].ID = id
	}
	j.ids = j.ids[n:]
	return claims, nil
}

func (j *noJournal) Record(_ context.Context, o []batch.Outcome) error {
	j.done.Add(int64(len(o)))
	return nil
}

func (j *noJournal) Outcomes(context.Context, func(batch.Outcome) error) error { return nil }

func (j *noJournal) Counts(context.Context) (batch.Counts, error) { return batch.Counts{}, nil }

func (j *noJournal) Close() error { return nil }

// BenchmarkBatch runs 100 000 requests at concurrency 64 against a fast
// loopback upstream, journaled in a file (bbolt), in PostgreSQL or
// nowhere (the baseline), and reports requests per second; what a journal
// costs a request is the difference of the inverse rates. It reports too
// the share of the senders' time spent waiting on the journal's Claim and
// Record. Run it with -benchtime=1x.
func BenchmarkBatch(b *testing.B) {
	const items, concurrency = 100_000, 64
	body := `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"` + strings.Repeat("ok ", 60) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":60,"total_tokens":69}}`
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	defer hs.Close()
	var lines strings.Builder
	for i := range items {
		fmt.Fprintf(&lines, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"classify item %d"}]}}`+"\n", i, i)
	}
	f, err := batch.Read(strings.NewReader(lines.String()))
	if err != nil {
		b.Fatal(err)
	}
	for _, where := range []string{"none", "bbolt", "postgres"} {
		b.Run("journal="+where, func(b *testing.B) {
			b.ReportAllocs()
			var perSec, journalShare float64
			for range b.N {
				var inner batch.Journal = &noJournal{}
				var err error
				switch where {
				case "bbolt":
					inner, err = batchrun.OpenJournal(b.Context(), filepath.Join(b.TempDir(), "bench.journal"), reboundpg.Config{}, false)
				case "postgres":
					inner, err = batchrun.OpenJournal(b.Context(), postgresURL(), reboundpg.Config{Batch: fmt.Sprintf("bench-%d-%d", os.Getpid(), time.Now().UnixNano()), Schema: postgresSchema(b)}, false)
				}
				if err != nil {
					b.Fatal(err)
				}
				j := &timedJournal{Journal: inner}
				r := &batch.Runner{BaseURL: hs.URL, Concurrency: concurrency}
				s, err := r.Run(b.Context(), f, j)
				j.Close()
				if err != nil || s.Succeeded != items {
					b.Fatalf("run: %v, %+v", err, s)
				}
				perSec += float64(items) / s.Elapsed.Seconds()
				journalShare += float64(j.spent.Load()) / float64(s.Elapsed*concurrency)
			}
			b.ReportMetric(perSec/float64(b.N), "req/s")
			b.ReportMetric(100*journalShare/float64(b.N), "%senders-in-journal")
		})
	}
}
