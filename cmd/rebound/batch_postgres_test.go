package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresURL is the PostgreSQL the tests use: REBOUND_POSTGRES_URL, else
// the one on 127.0.0.1:5432, database test. Without it they fail, saying
// so; they never skip.
func postgresURL() string {
	if u := os.Getenv("REBOUND_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// postgresSchema returns a schema name of this run's own, and drops the
// schema when the test ends.
func postgresSchema(t testing.TB) string {
	t.Helper()
	schema := "rebound_cli_" + strconv.Itoa(os.Getpid()) + "_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, postgresURL())
	if err != nil {
		t.Fatalf("this test needs PostgreSQL on 127.0.0.1:5432 with a database test (or REBOUND_POSTGRES_URL): %v", err)
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

// worker is a "rebound batch" process of a shared journal.
type worker struct {
	stdout, stderr lockedBuffer
	exited         chan error
	out            string
}

// runWorkers starts n workers of "rebound batch" with args, each with an
// --out of its own, kills the first when halfway is closed, and returns
// once they have all exited; a survivor that fails, or any that takes a
// minute, fails the test.
func runWorkers(t *testing.T, n int, halfway <-chan struct{}, args ...string) []*worker {
	t.Helper()
	dir := t.TempDir()
	workers := make([]*worker, n)
	for i := range workers {
		w := &worker{exited: make(chan error, 1), out: filepath.Join(dir, fmt.Sprintf("out-%d.jsonl", i))}
		cmd := commandProcess(t, append(args, "--out", w.out)...)
		cmd.Stdout, cmd.Stderr = &w.stdout, &w.stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { w.exited <- cmd.Wait() }()
		workers[i] = w
		if i == 0 {
			defer cmd.Process.Kill()
			go func() {
				<-halfway
				cmd.Process.Kill()
			}()
		}
	}
	for i, w := range workers {
		select {
		case err := <-w.exited:
			if i > 0 && err != nil {
				t.Errorf("worker %d: %v; stderr %s", i, err, w.stderr.String())
			}
		case <-time.After(time.Minute):
			t.Fatalf("worker %d has not finished in a minute; stderr %s", i, w.stderr.String())
		}
	}
	return workers
}

// TestBatchWorkersShareAPostgresJournal runs three workers, processes of
// their own, on one batch through PostgreSQL, and kills one with SIGKILL
// halfway: the other two take its items over once its leases run out,
// and each writes an output with every custom_id exactly once. Nothing is
// sent twice but what the killed worker had in flight.
func TestBatchWorkersShareAPostgresJournal(t *testing.T) {
	t.Parallel()
	const (
		items       = 900
		concurrency = 8
	)
	schema := postgresSchema(t)
	arrived := &arrivals{}
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.arrived()
		select { // a provider's latency
		case <-time.After(2 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
		w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}]}`))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, items)
	halfway := arrived.after(items / 2)

	workers := runWorkers(t, 3, halfway, "batch", in, "--journal", postgresURL(), "--schema", schema,
		"--batch-name", "evals", "--lease", "1s", "--base-url", hs.URL, "--concurrency", strconv.Itoa(concurrency), "--json")
	sent := up.take()
	for _, w := range workers[1:] {
		got := outputLines(t, w.out)
		if len(got) != items {
			t.Errorf("%s has %d custom_ids, want %d", w.out, len(got), items)
		}
		for id, n := range got {
			if n != 1 {
				t.Errorf("%s has %s %d times", w.out, id, n)
			}
		}
	}
	again := 0
	for _, n := range sent {
		again += n - 1
	}
	if len(sent) != items || again > concurrency {
		t.Errorf("%d ids sent, %d of them again; want %d, and no more again than the killed worker's %d in flight", len(sent), again, items, concurrency)
	}
	code, out, _ := runCmd("batch", "status", "--journal", postgresURL(), "--schema", schema, "--batch-name", "evals")
	if code != 0 || !strings.HasPrefix(out, fmt.Sprintf("%d requests: %d succeeded", items, items)) {
		t.Errorf("status: exit %d, %q", code, out)
	}
	if code, _, stderr := runCmd("batch", "status", "--journal", postgresURL(), "--schema", schema, "--batch-name", "no-such"); code != 1 || !strings.Contains(stderr, `no batch "no-such"`) {
		t.Errorf("status of a batch that is not there: exit %d, %q", code, stderr)
	}
	var reports []string
	for _, w := range workers[1:] {
		reports = append(reports, w.stdout.String())
	}
	t.Logf("%d ids, %d sent again; the survivors' reports: %s", len(sent), again, reports)
}
