package reboundpg

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound/batch"
)

// BenchmarkJournal runs a batch of 100 000 items through a journal as
// rebound batch does: one dispatcher claiming up to 64 at a time while 64
// in flight, 64 recorders each recording one outcome of a ~600-byte body
// at a time. Preparing the batch is outside the timing, and measured on
// its own as prepare-ms.
func BenchmarkJournal(b *testing.B) {
	const n, recorders = 100_000, 64
	schema := freshSchema(b)
	ids := items(n)
	body := bytes.Repeat([]byte("x"), 600)
	var prepare time.Duration
	b.ReportAllocs()
	for i := range b.N {
		b.StopTimer()
		j, err := Open(context.Background(), postgresURL(), Config{Batch: fmt.Sprint("bench-", i), Schema: schema})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := j.Prepare(context.Background(), batch.Input{Digest: "d", IDs: ids}, batch.Options{}); err != nil {
			b.Fatal(err)
		}
		prepare += time.Since(start)
		b.StartTimer()

		work := make(chan string, recorders)
		free := make(chan struct{}, recorders) // a token per request slot not in flight
		for range recorders {
			free <- struct{}{}
		}
		var wg sync.WaitGroup
		for range recorders {
			wg.Go(func() {
				for id := range work {
					o := batch.Outcome{ID: id, State: batch.Succeeded, StatusCode: 200, RequestID: "req_" + id, Body: body, Attempts: 1}
					if err := j.Record(context.Background(), []batch.Outcome{o}); err != nil {
						b.Error(err)
					}
					free <- struct{}{}
				}
			})
		}
		for {
			<-free // wait for a slot, then claim for every slot free
			slots := 1
			for more := true; more; {
				select {
				case <-free:
					slots++
				default:
					more = false
				}
			}
			c, err := j.Claim(context.Background(), slots)
			if err != nil {
				b.Fatal(err)
			}
			for range slots - len(c) {
				free <- struct{}{}
			}
			for _, c := range c {
				work <- c.ID
			}
			if len(c) == 0 {
				break
			}
		}
		close(work)
		wg.Wait()

		b.StopTimer()
		if c, err := j.Counts(context.Background()); err != nil || c.Succeeded != n {
			b.Fatalf("counts %+v, %v", c, err)
		}
		j.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(prepare.Milliseconds())/float64(b.N), "prepare-ms")
	b.ReportMetric(0, "ns/op")
}
