package reboundbolt_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/rebound-go/rebound/batch"
	reboundbolt "github.com/rebound-go/rebound/bolt"
)

// A run that stops half-way, and the run that resumes it: the second sends
// only what the first did not finish, and says which of those may have
// reached the provider already.
func Example() {
	dir, err := os.MkdirTemp("", "journal")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "requests.journal")
	ctx := context.Background()
	in := batch.Input{Digest: "sha256:…", IDs: []string{"req-1", "req-2", "req-3"}}

	first, err := reboundbolt.Open(path, reboundbolt.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := first.Prepare(ctx, in, batch.Options{}); err != nil {
		log.Fatal(err)
	}
	claims, _ := first.Claim(ctx, 2) // req-1 and req-2 go out
	first.Record(ctx, []batch.Outcome{{ID: claims[0].ID, State: batch.Succeeded, StatusCode: 200, Body: []byte(`{"ok":true}`)}})
	first.Close() // stopped before req-2 was answered

	next, err := reboundbolt.Open(path, reboundbolt.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer next.Close()
	if err := next.Prepare(ctx, in, batch.Options{}); err != nil {
		log.Fatal(err)
	}
	claims, _ = next.Claim(ctx, 10)
	for _, c := range claims {
		fmt.Printf("send %s (resent: %v)\n", c.ID, c.Resent)
	}
	counts, _ := next.Counts(ctx)
	fmt.Printf("%+v\n", counts)
	// Output:
	// send req-2 (resent: true)
	// send req-3 (resent: false)
	// {Total:3 Pending:0 InFlight:2 Succeeded:1 Failed:0 FailedPermanent:0}
}
