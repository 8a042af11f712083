package reboundpg_test

import (
	"context"
	"fmt"
	"log"

	"github.com/rebound-go/rebound/batch"
	reboundpg "github.com/rebound-go/rebound/postgres"
)

// A worker's run over a batch that other workers may share. It needs a
// PostgreSQL server, so it is compiled and not run.
func Example() {
	ctx := context.Background()
	j, err := reboundpg.Open(ctx, "postgres://rebound@db.example:5432/jobs", reboundpg.Config{Batch: "nightly-evals"})
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	in := batch.Input{Digest: "sha256:…", IDs: []string{"req-1", "req-2", "req-3"}}
	if err := j.Prepare(ctx, in, batch.Options{}); err != nil {
		log.Fatal(err) // errors.Is(err, batch.ErrDifferentInput): the name is taken by another input
	}
	for {
		claims, err := j.Claim(ctx, 64)
		if err != nil {
			log.Fatal(err)
		}
		if len(claims) == 0 {
			break
		}
		for _, c := range claims {
			// Send the request; c.Resent says an earlier send may have
			// reached the provider.
			o := batch.Outcome{ID: c.ID, State: batch.Succeeded, StatusCode: 200, Body: []byte(`{}`), Attempts: 1}
			if err := j.Record(ctx, []batch.Outcome{o}); err != nil {
				log.Fatal(err)
			}
		}
	}
	counts, err := j.Counts(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d of %d succeeded\n", counts.Succeeded, counts.Total)
}
