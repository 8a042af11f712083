package reboundpg

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound/batch"
	"github.com/rebound-go/rebound/batch/journaltest"
)

func TestJournal(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journaltest.Opener {
		cfg := Config{Batch: "b", Schema: freshSchema(t)}
		return func() (batch.Journal, error) {
			return Open(context.Background(), postgresURL(), cfg)
		}
	})
}

// TestBatchesShareTables keeps two batches apart in one schema.
func TestBatchesShareTables(t *testing.T) {
	schema := freshSchema(t)
	a := openJournal(t, Config{Batch: "a", Schema: schema})
	b := openJournal(t, Config{Batch: "b", Schema: schema})
	prepare(t, a, items(3))
	if err := b.Prepare(context.Background(), batch.Input{Digest: "other", IDs: items(5)}, batch.Options{}); err != nil {
		t.Fatal(err)
	}
	c, err := a.Claim(context.Background(), 10)
	if err != nil || len(c) != 3 {
		t.Fatalf("batch a claimed %v, %v; want its 3 items", c, err)
	}
	if got, _ := b.Counts(context.Background()); got != (batch.Counts{Total: 5, Pending: 5}) {
		t.Errorf("batch b counts %+v after a's claim", got)
	}
}

// TestDifferentInputNamesTheBatch checks the error of a digest that is
// not the batch's.
func TestDifferentInputNamesTheBatch(t *testing.T) {
	schema := freshSchema(t)
	prepare(t, openJournal(t, Config{Batch: "nightly-evals", Schema: schema}), items(3))
	j := openJournal(t, Config{Batch: "nightly-evals", Schema: schema})
	err := j.Prepare(context.Background(), batch.Input{Digest: "digest-2", IDs: items(3)}, batch.Options{})
	if !errors.Is(err, batch.ErrDifferentInput) || !strings.Contains(err.Error(), `"nightly-evals"`) {
		t.Errorf("Prepare with another digest: %v; want ErrDifferentInput naming the batch", err)
	}
}

// TestPrepareRace opens and prepares one batch from three workers at once
// on a schema that does not exist yet: the tables are made once, one
// worker fills the batch and the others find it, all with the same digest.
func TestPrepareRace(t *testing.T) {
	schema := freshSchema(t)
	ids := items(5000)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			<-start
			j, err := Open(context.Background(), postgresURL(), Config{Batch: "race", Schema: schema})
			if err != nil {
				t.Errorf("worker %d: Open: %v", i, err)
				return
			}
			defer j.Close()
			if err := j.Prepare(context.Background(), batch.Input{Digest: "digest-1", IDs: ids}, batch.Options{}); err != nil {
				t.Errorf("worker %d: Prepare: %v", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	j := openJournal(t, Config{Batch: "race", Schema: schema})
	if c, err := j.Counts(context.Background()); err != nil || c != (batch.Counts{Total: len(ids), Pending: len(ids)}) {
		t.Errorf("counts after the race: %+v, %v", c, err)
	}
	err := j.Prepare(context.Background(), batch.Input{Digest: "digest-2", IDs: ids}, batch.Options{})
	if !errors.Is(err, batch.ErrDifferentInput) {
		t.Errorf("Prepare with another digest after the race: %v", err)
	}
}

// TestOpenHidesThePassword opens URLs with a password that cannot work
// and checks that no error repeats it.
func TestOpenHidesThePassword(t *testing.T) {
	const pw = "s3cret-Pa55word"
	for _, url := range []string{
		"postgres://postgres:" + pw + "@127.0.0.1:1/test?sslmode=disable&connect_timeout=2",
		"postgres://postgres:" + pw + "@no-such-host.invalid:5432/test?connect_timeout=2",
		"postgres://postgres:" + pw + "@127.0.0.1:notaport/test",
		"postgres://postgres@127.0.0.1:1/test?password=" + pw + "&connect_timeout=2",
		"host=127.0.0.1 port=1 user=postgres password=" + pw + " dbname=test connect_timeout=2",
		"postgres://postgres:" + pw + "@127.0.0.1:5432/test?sslmode=bogus",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		j, err := Open(ctx, url, Config{Batch: "b", Schema: "rebound_test_never_made"})
		cancel()
		if err == nil {
			j.Close()
			t.Errorf("Open(%q) succeeded", strings.ReplaceAll(url, pw, "PASSWORD"))
			continue
		}
		if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "Pa55") {
			t.Errorf("the error of Open repeats the password: %v", err)
		}
	}
}

// TestConfigErrors checks what Open refuses before connecting.
func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{{}, {Batch: "b", Lease: -time.Second}} {
		if j, err := Open(context.Background(), postgresURL(), cfg); err == nil {
			j.Close()
			t.Errorf("Open with %+v succeeded", cfg)
		}
	}
}

// TestClosed checks that a closed journal says so.
func TestClosed(t *testing.T) {
	j := openJournal(t, Config{Batch: "b", Schema: freshSchema(t)})
	prepare(t, j, items(2))
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Claim(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Claim after Close: %v", err)
	}
	if err := j.Record(context.Background(), []batch.Outcome{succeeded("item-00000")}); !errors.Is(err, ErrClosed) {
		t.Errorf("Record after Close: %v", err)
	}
	if err := j.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestOddText stores an error message that a text column would refuse
// as it is, and its neighbours in the same group still get written.
func TestOddText(t *testing.T) {
	j := openJournal(t, Config{Batch: "b", Schema: freshSchema(t)})
	prepare(t, j, items(2))
	if _, err := j.Claim(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	odd := batch.Outcome{ID: "item-00000", State: batch.Failed, StatusCode: 500, ErrorMessage: "bad \xff\x00 bytes", Body: []byte("\xff\x00")}
	if err := j.Record(context.Background(), []batch.Outcome{odd, succeeded("item-00001")}); err != nil {
		t.Fatal(err)
	}
	var got []batch.Outcome
	j.Outcomes(context.Background(), func(o batch.Outcome) error { got = append(got, o); return nil })
	if len(got) != 2 || string(got[0].Body) != "\xff\x00" || got[0].ErrorMessage != "bad \uFFFD bytes" {
		t.Errorf("outcomes %+v", got)
	}
}

// TestRecordAfterLostLease records an outcome of a claim whose lease ran
// out and went to another worker: it still counts, and the other
// worker's later success does not undo the first.
func TestRecordAfterLostLease(t *testing.T) {
	schema := freshSchema(t)
	a := openJournal(t, Config{Batch: "b", Schema: schema, Lease: time.Second})
	b := openJournal(t, Config{Batch: "b", Schema: schema, Lease: time.Second})
	prepare(t, a, items(1))
	prepare(t, b, items(1))
	if _, err := a.Claim(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	expire(t, a)
	c, err := b.Claim(context.Background(), 1)
	if err != nil || len(c) != 1 || !c[0].Resent {
		t.Fatalf("b claimed %+v, %v; want the item, resent", c, err)
	}
	first := succeeded("item-00000")
	first.RequestID = "from-a"
	if err := a.Record(context.Background(), []batch.Outcome{first}); err != nil {
		t.Fatal(err)
	}
	late := succeeded("item-00000")
	late.RequestID = "from-b"
	if err := b.Record(context.Background(), []batch.Outcome{late}); err != nil {
		t.Fatal(err)
	}
	b.Outcomes(context.Background(), func(o batch.Outcome) error {
		if o.RequestID != "from-a" {
			t.Errorf("outcome %+v, want a's", o)
		}
		return nil
	})
}

// expire ends j's leases now, as if they had run out, and stops their
// renewal.
func expire(t testing.TB, j *Journal) {
	t.Helper()
	j.mu.Lock()
	ids := heldIDs(j.held)
	clear(j.held)
	j.mu.Unlock()
	if _, err := j.pool.Exec(context.Background(), j.sql.giveBack, j.batch, ids, j.holder); err != nil {
		t.Fatal(err)
	}
}
