package reboundpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rebound-go/rebound/batch"
	"go.uber.org/goleak"
)

// The tests need a PostgreSQL server: REBOUND_POSTGRES_URL names it, else
// the one on 127.0.0.1:5432, database test. They never skip: without it
// they fail, saying so. Each test keeps its tables in a schema of its own,
// named for the run, and drops it when it ends.

func postgresURL() string {
	if u := os.Getenv("REBOUND_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// shown is url as a message may show it: without its password.
func shown(url string) string {
	return redactor(url)(errors.New(url)).Error()
}

// runID keeps this run's schemas apart from any other run's on the same
// server.
var runID = strconv.Itoa(os.Getpid()) + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)

var schemas atomic.Int64

// TestMain runs a child's function instead of the tests when the binary
// is started as a child, and checks that no goroutine outlives the tests.
func TestMain(m *testing.M) {
	if role := os.Getenv("REBOUND_CHILD"); role != "" {
		if err := children[role](); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// children are the functions a child process may run, by name.
var children = map[string]func() error{}

// freshSchema returns a schema name unique to the run and the test, and
// drops the schema when the test ends. It fails the test if the server
// does not answer.
func freshSchema(t testing.TB) string {
	t.Helper()
	schema := fmt.Sprintf("rebound_test_%s_%d", runID, schemas.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		t.Fatalf("these tests need a PostgreSQL server at %s (set REBOUND_POSTGRES_URL to use another): %v", shown(postgresURL()), redactor(postgresURL())(err))
	}
	conn.Close(ctx)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, postgresURL())
		if err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("dropping schema %s: %v", schema, err)
		}
	})
	return schema
}

// openJournal opens a Journal of cfg on the test server, failing the test
// on error, and closes it when the test ends.
func openJournal(t testing.TB, cfg Config) *Journal {
	t.Helper()
	j, err := Open(context.Background(), postgresURL(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// items returns n custom_ids, "item-00000", "item-00001", ...
func items(n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("item-%05d", i)
	}
	return ids
}

func prepare(t testing.TB, j *Journal, ids []string) {
	t.Helper()
	if err := j.Prepare(context.Background(), batch.Input{Digest: "digest-1", IDs: ids}, batch.Options{}); err != nil {
		t.Fatalf("Prepare: %v", err)
	}
}

func succeeded(id string) batch.Outcome {
	return batch.Outcome{ID: id, State: batch.Succeeded, StatusCode: 200, Body: []byte(`{"id":"` + id + `"}`), Attempts: 1}
}

// dbNow returns the server's time.
func dbNow(t testing.TB, j *Journal) time.Time {
	t.Helper()
	var now time.Time
	if err := j.pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}
