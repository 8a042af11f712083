package reboundbolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"go.uber.org/goleak"

	"github.com/rebound-go/rebound/batch"
	"github.com/rebound-go/rebound/batch/journaltest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ batch.Journal = (*Journal)(nil)

func TestConformance(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journaltest.Opener {
		path := filepath.Join(t.TempDir(), "batch.journal")
		return func() (batch.Journal, error) { return Open(path, Config{}) }
	})
}

func newJournal(t *testing.T, cfg Config) (*Journal, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "batch.journal")
	j, err := Open(path, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j, path
}

func ids(n int) batch.Input {
	in := batch.Input{Digest: "d"}
	for i := range n {
		in.IDs = append(in.IDs, fmt.Sprintf("id-%d", i))
	}
	return in
}

func oneLine(t *testing.T, err error, want ...string) {
	t.Helper()
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("error of several lines: %q", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not say %q", msg, w)
		}
	}
}

func TestInUse(t *testing.T) {
	_, path := newJournal(t, Config{})
	_, err := Open(path, Config{LockTimeout: 20 * time.Millisecond})
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("a second Open: %v, want ErrInUse", err)
	}
	oneLine(t, err, path, "another run is using")
	if _, err := Open(path, Config{ReadOnly: true, LockTimeout: -1}); !errors.Is(err, ErrInUse) {
		t.Errorf("a read-only Open under a run: %v, want ErrInUse", err)
	}
}

func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	j, path := newJournal(t, Config{})
	in := ids(3)
	if err := j.Prepare(ctx, in, batch.Options{}); err != nil {
		t.Fatal(err)
	}
	j.Claim(ctx, 2)
	if err := j.Record(ctx, []batch.Outcome{{ID: "id-0", State: batch.Succeeded, Body: []byte("ok")}}); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	// Two readers at once.
	r1, err := Open(path, Config{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	r2, err := Open(path, Config{ReadOnly: true})
	if err != nil {
		t.Fatalf("a second reader: %v", err)
	}
	defer r2.Close()
	got, err := r2.Counts(ctx)
	if want := (batch.Counts{Total: 3, Pending: 2, Succeeded: 1}); err != nil || got != want {
		t.Errorf("Counts: %+v, %v; want %+v", got, err, want)
	}
	n := 0
	if err := r1.Outcomes(ctx, func(o batch.Outcome) error { n++; return nil }); err != nil || n != 1 {
		t.Errorf("Outcomes: %d, %v", n, err)
	}
	if err := r1.Prepare(ctx, in, batch.Options{}); err == nil {
		t.Error("a read-only journal was prepared")
	}
	if _, err := Open(path, Config{LockTimeout: -1}); !errors.Is(err, ErrInUse) {
		t.Errorf("a run under a reader: %v, want ErrInUse", err)
	}
	r1.Close()
	r2.Close()
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("reading changed the file")
	}

	missing := filepath.Join(t.TempDir(), "missing.journal")
	if _, err := Open(missing, Config{ReadOnly: true}); err == nil {
		t.Error("a read-only Open of a missing file succeeded")
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a read-only Open created the file: %v", err)
	}
}

func TestNotAJournal(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 64<<10)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	files := map[string][]byte{
		"text":  []byte("id,prompt\n1,hello\n"),
		"noise": noise,
	}
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, ro := range []bool{false, true} {
			_, err := Open(path, Config{ReadOnly: ro})
			if !errors.Is(err, ErrNotJournal) {
				t.Errorf("%s (read-only %v): %v, want ErrNotJournal", name, ro, err)
				continue
			}
			oneLine(t, err, path, "not a journal")
		}
	}

	// A bbolt file of another program.
	path := filepath.Join(dir, "other.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("widgets")); return err })
	db.Close()
	_, err = Open(path, Config{})
	if !errors.Is(err, ErrNotJournal) {
		t.Fatalf("another program's bbolt file: %v, want ErrNotJournal", err)
	}
	oneLine(t, err, path, "not a journal")
}

// poke changes the file of a closed journal.
func poke(t *testing.T, path string, fn func(tx *bolt.Tx) error) {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

func TestNewerFormat(t *testing.T) {
	j, path := newJournal(t, Config{})
	j.Close()
	poke(t, path, func(tx *bolt.Tx) error {
		return tx.Bucket(metaBucket).Put(keyFormat, binary.AppendUvarint(nil, formatVersion+1))
	})
	_, err := Open(path, Config{})
	if !errors.Is(err, ErrNewerFormat) {
		t.Fatalf("Open: %v, want ErrNewerFormat", err)
	}
	oneLine(t, err, path, fmt.Sprintf("format %d", formatVersion+1))
}

func TestCorrupt(t *testing.T) {
	ctx := context.Background()
	setup := func(t *testing.T) string {
		j, path := newJournal(t, Config{})
		if err := j.Prepare(ctx, ids(3), batch.Options{}); err != nil {
			t.Fatal(err)
		}
		j.Claim(ctx, 1)
		if err := j.Record(ctx, []batch.Outcome{{ID: "id-0", State: batch.Succeeded, Body: []byte("ok")}}); err != nil {
			t.Fatal(err)
		}
		j.Close()
		return path
	}
	t.Run("outcome", func(t *testing.T) {
		path := setup(t)
		poke(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket(outcomesBucket).Put(putKey(nil, 0), []byte{byte(batch.Succeeded), 0x80})
		})
		j, err := Open(path, Config{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		err = j.Outcomes(ctx, func(batch.Outcome) error { return nil })
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Outcomes: %v, want ErrCorrupt", err)
		}
		oneLine(t, err, path, "corrupt", "id-0")
	})
	t.Run("item", func(t *testing.T) {
		path := setup(t)
		poke(t, path, func(tx *bolt.Tx) error {
			return tx.Bucket(itemsBucket).Put(putKey(nil, 1), []byte{9, 0, 'x'})
		})
		j, err := Open(path, Config{})
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		if _, err := j.Counts(ctx); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Counts: %v, want ErrCorrupt", err)
		}
		err = j.Prepare(ctx, ids(3), batch.Options{})
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Prepare: %v, want ErrCorrupt", err)
		}
		oneLine(t, err, path, "corrupt", "item 1")
	})
	t.Run("format", func(t *testing.T) {
		path := setup(t)
		poke(t, path, func(tx *bolt.Tx) error { return tx.Bucket(metaBucket).Delete(keyFormat) })
		if _, err := Open(path, Config{}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Open: %v, want ErrCorrupt", err)
		}
	})
}

func TestMisuse(t *testing.T) {
	ctx := context.Background()
	j, _ := newJournal(t, Config{})
	if _, err := j.Claim(ctx, 1); err == nil {
		t.Error("Claim before Prepare succeeded")
	}
	if err := j.Record(ctx, []batch.Outcome{{ID: "id-0", State: batch.Succeeded}}); err == nil {
		t.Error("Record before Prepare succeeded")
	}
	dup := batch.Input{Digest: "d", IDs: []string{"a", "b", "a"}}
	if err := j.Prepare(ctx, dup, batch.Options{}); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("Prepare of a duplicate custom_id: %v", err)
	}
	if err := j.Prepare(ctx, ids(2), batch.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := j.Prepare(ctx, ids(2), batch.Options{}); err == nil {
		t.Error("a second Prepare succeeded")
	}
	j.Claim(ctx, 2)
	err := j.Record(ctx, []batch.Outcome{{ID: "id-0", State: batch.Succeeded}, {ID: "nope", State: batch.Succeeded}})
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("Record of an unknown id: %v", err)
	}
	if err := j.Record(ctx, []batch.Outcome{{ID: "id-0", State: batch.InFlight}}); err == nil {
		t.Error("Record of InFlight succeeded")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if err := j.Record(canceled, []batch.Outcome{{ID: "id-0", State: batch.Succeeded}}); !errors.Is(err, context.Canceled) {
		t.Errorf("Record with a canceled context: %v", err)
	}
	if c, _ := j.Counts(ctx); c != (batch.Counts{Total: 2, InFlight: 2}) {
		t.Errorf("failed Records wrote something: %+v", c)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	if _, err := j.Claim(ctx, 1); err == nil {
		t.Error("Claim after Close succeeded")
	}
	if _, err := j.Counts(ctx); err == nil {
		t.Error("Counts after Close succeeded")
	}
}

// TestCountsFollowTheFile records at random from many goroutines and
// checks that the counts kept in memory are the file's.
func TestCountsFollowTheFile(t *testing.T) {
	ctx := context.Background()
	j, _ := newJournal(t, Config{})
	const n = 3000
	if err := j.Prepare(ctx, ids(n), batch.Options{}); err != nil {
		t.Fatal(err)
	}
	states := []batch.State{batch.Pending, batch.Succeeded, batch.Failed, batch.FailedPermanent}
	work := make(chan string)
	var wg sync.WaitGroup
	for w := range 16 {
		rng := rand.New(rand.NewPCG(7, uint64(w)))
		wg.Go(func() {
			for id := range work {
				o := batch.Outcome{ID: id, State: states[rng.IntN(len(states))], Body: []byte(id)}
				if err := j.Record(ctx, []batch.Outcome{o}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for claimed := 0; claimed < 2*n; {
		c, err := j.Claim(ctx, 64)
		if err != nil {
			t.Fatal(err)
		}
		if len(c) == 0 {
			break
		}
		claimed += len(c)
		for _, c := range c {
			work <- c.ID
		}
	}
	close(work)
	wg.Wait()
	mem, _ := j.Counts(ctx)
	file, err := j.scanCounts(ctx)
	if err != nil || mem != file {
		t.Errorf("counts in memory %+v, in the file %+v (%v)", mem, file, err)
	}
	if mem.Pending+mem.InFlight == mem.Total {
		t.Errorf("nothing was recorded: %+v", mem)
	}
}
