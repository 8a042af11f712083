package reboundbolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/rebound-go/rebound/batch"
)

// Errors of Open and of reading a journal. Each is wrapped in a one-line
// error that names the file.
var (
	// ErrInUse: another process (another run, or a status reader while a
	// run goes on) holds the file's lock for longer than
	// Config.LockTimeout.
	ErrInUse = errors.New("another run is using the journal")
	// ErrNotJournal: the file is not a journal: a bbolt file that some
	// other program made, or no bbolt file at all (then the error is
	// ErrCorrupt too: a journal whose first pages were overwritten looks
	// the same).
	ErrNotJournal = errors.New("not a journal")
	// ErrNewerFormat: the journal was written by a newer build of rebound,
	// in a format this one cannot read.
	ErrNewerFormat = errors.New("journal of a newer format")
	// ErrCorrupt: the file is damaged: cut short, empty, pages or records
	// overwritten. Open checks every page that bbolt may read, so that a
	// damaged file is this error rather than a crash.
	ErrCorrupt = errors.New("corrupt journal")
)

var (
	errClosed   = errors.New("reboundbolt: the journal is closed")
	errReadOnly = errors.New("reboundbolt: the journal is open read-only")
)

// Config configures Open. The zero value opens a journal for a run.
type Config struct {
	// LockTimeout is how long Open waits for the file's lock while another
	// process holds it before it fails with ErrInUse. The default (0) is
	// 200ms: a run that finds another one using its journal should say so,
	// not queue behind it. A negative value tries once.
	LockTimeout time.Duration

	// ReadOnly opens the journal to read it (Counts, Outcomes) under a
	// shared lock, as `rebound batch status` does: several readers may
	// hold it together, but not while a run holds the file. It never
	// creates or changes the file. The default (false) opens it for a run.
	ReadOnly bool

	// Sync makes every commit wait until the disk has the data (fdatasync),
	// so that recorded outcomes survive the machine losing power, not only
	// the process being killed. The default (false) leaves the writing back
	// to the kernel: see the package documentation.
	Sync bool
}

const defaultLockTimeout = 200 * time.Millisecond

// A Journal is a batch.Journal kept in one bbolt file. Create one with
// Open.
type Journal struct {
	db       *bolt.DB
	path     string
	readOnly bool

	reqs chan *request // to the writer goroutine; nil when read-only
	done chan struct{} // closed when the writer goroutine has returned

	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex
	run    *run         // guarded by mu; set by Prepare
	counts batch.Counts // guarded by mu; the committed counts, once run is set
	closed bool         // guarded by mu
	broken error        // guarded by mu: bbolt panicked, and may hold its locks: it is not called again

	w writer // owned by the writer goroutine
}

// run is what Prepare learns of the input; it does not change after.
type run struct {
	ids   []string
	index map[string]uint32
}

// Open opens the journal at path, creating the file if it is missing
// (unless cfg.ReadOnly). It fails with ErrInUse while another process
// holds the file, with ErrNotJournal or ErrNewerFormat when the file is not
// a journal this build reads, and with ErrCorrupt when it is damaged (cut
// short, pages overwritten): every page bbolt may read is checked before
// it reads it, since bbolt crashes the process on a bad page.
func Open(path string, cfg Config) (*Journal, error) {
	timeout := cfg.LockTimeout
	switch {
	case timeout == 0:
		timeout = defaultLockTimeout
	case timeout < 0:
		timeout = time.Nanosecond // bbolt waits forever on 0
	}
	var db *bolt.DB
	if st, err := os.Stat(path); cfg.ReadOnly || (err == nil && (st.Size() > 0 || !st.Mode().IsRegular())) {
		// bbolt opens a file for writing by walking its pages, in
		// goroutines of its own: the file is checked first, read only.
		if db, err = openChecked(path, cfg, timeout); err != nil {
			return nil, err
		}
		if !cfg.ReadOnly {
			db.Close()
			db = nil
		}
	}
	if db == nil {
		var err error
		if db, err = bolt.Open(path, 0o600, boltOptions(cfg, timeout, false)); err != nil {
			return nil, openError(path, cfg, timeout, err)
		}
	}
	j := &Journal{db: db, path: path, readOnly: cfg.ReadOnly}
	if err := j.init(); err != nil {
		if j.brokenErr() == nil {
			db.Close()
		}
		return nil, err
	}
	if !j.readOnly {
		j.reqs = make(chan *request)
		j.done = make(chan struct{})
		go j.write()
	}
	return j, nil
}

func boltOptions(cfg Config, timeout time.Duration, readOnly bool) *bolt.Options {
	return &bolt.Options{
		Timeout:  timeout,
		ReadOnly: readOnly,
		NoSync:   !cfg.Sync,
		// The freelist is rebuilt by walking the tree when the file is
		// opened, rather than written at every commit: commits are many,
		// opens are few.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	}
}

// openChecked opens the file at path read only and checks every page
// that bbolt may read.
func openChecked(path string, cfg Config, timeout time.Duration) (*bolt.DB, error) {
	st, err := os.Stat(path) // not opened first: opening a FIFO waits for a writer
	switch {
	case err != nil:
		return nil, fmt.Errorf("reboundbolt: %w", err)
	case !st.Mode().IsRegular():
		return nil, fmt.Errorf("reboundbolt: %s is not a regular file", path)
	case st.Size() == 0:
		// A run stopped before bbolt wrote the file's first pages; the
		// next run starts it afresh.
		return nil, fmt.Errorf("reboundbolt: %s: %w: the file is empty", path, ErrCorrupt)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reboundbolt: %w", err)
	}
	defer f.Close()
	db, err := bolt.Open(path, 0o600, boltOptions(cfg, timeout, true))
	if err != nil {
		return nil, openError(path, cfg, timeout, err)
	}
	if err := checkFile(f, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("reboundbolt: %s: %w: %v", path, ErrCorrupt, err)
	}
	return db, nil
}

// openError is the error of Open for an error of bbolt's Open.
func openError(path string, cfg Config, timeout time.Duration, err error) error {
	var errno syscall.Errno
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		if cfg.LockTimeout < 0 {
			return fmt.Errorf("reboundbolt: %s: %w (it holds the file's lock)", path, ErrInUse)
		}
		return fmt.Errorf("reboundbolt: %s: %w (it held the file's lock for %v)", path, ErrInUse, timeout)
	case errors.As(err, new(*fs.PathError)) || errors.As(err, &errno):
		// The file could not be read: it may be whole.
		return fmt.Errorf("reboundbolt: %s: %w", path, err)
	}
	// No meta page that bbolt takes for its own (another kind of file,
	// or a journal whose first pages are overwritten), or a file shorter
	// than its meta pages.
	return fmt.Errorf("reboundbolt: %s: %w, or %w (%v)", path, ErrCorrupt, ErrNotJournal, err)
}

// init checks that the file is a journal this build reads, and makes an
// empty one of a new file.
func (j *Journal) init() error {
	fresh := false
	err := j.view(func(tx *bolt.Tx) error {
		if tx.Bucket(metaBucket) != nil {
			return j.checkFormat(tx)
		}
		other, ours := false, false
		tx.ForEach(func(name []byte, _ *bolt.Bucket) error {
			other = true
			ours = ours || bytes.Equal(name, itemsBucket) || bytes.Equal(name, outcomesBucket)
			return nil
		})
		switch {
		case ours:
			return j.corrupt("the journal's meta bucket is missing")
		case other:
			return fmt.Errorf("reboundbolt: %s: %w (a bbolt file of another program)", j.path, ErrNotJournal)
		}
		fresh = true
		return nil
	})
	if err != nil || !fresh || j.readOnly {
		// A read-only opener takes a bbolt file with nothing in it for
		// an empty journal: its maker was stopped before its first
		// commit.
		return err
	}
	err = j.guard(func() error { return j.db.Update(j.create) })
	if err != nil {
		return fmt.Errorf("reboundbolt: %s: creating the journal: %w", j.path, err)
	}
	return nil
}

// create makes the buckets of an empty journal.
func (j *Journal) create(tx *bolt.Tx) error {
	meta, err := tx.CreateBucket(metaBucket)
	if err != nil {
		return err
	}
	if err := meta.Put(keyFormat, binary.AppendUvarint(nil, formatVersion)); err != nil {
		return err
	}
	if _, err := tx.CreateBucket(itemsBucket); err != nil {
		return err
	}
	_, err = tx.CreateBucket(outcomesBucket)
	return err
}

func (j *Journal) checkFormat(tx *bolt.Tx) error {
	v, n := binary.Uvarint(tx.Bucket(metaBucket).Get(keyFormat))
	switch {
	case n <= 0 || v == 0:
		return j.corrupt("no format version")
	case v > formatVersion:
		return fmt.Errorf("reboundbolt: %s: %w (format %d; this build reads format %d and older: use a newer rebound)", j.path, ErrNewerFormat, v, formatVersion)
	case tx.Bucket(itemsBucket) == nil || tx.Bucket(outcomesBucket) == nil:
		return j.corrupt("a bucket is missing")
	}
	return nil
}

func (j *Journal) corrupt(format string, args ...any) error {
	return fmt.Errorf("reboundbolt: %s: %w: %s", j.path, ErrCorrupt, fmt.Sprintf(format, args...))
}

// Prepare implements batch.Journal. Resuming a journal whose last run
// died (without Close) makes that run's claims claimable again, as Resent:
// the file's lock says no other process is using them.
func (j *Journal) Prepare(ctx context.Context, in batch.Input, opt batch.Options) error {
	if err := j.writable(); err != nil {
		return err
	}
	if len(in.IDs) > 1<<32-1 {
		return fmt.Errorf("reboundbolt: %d items are more than a journal holds", len(in.IDs))
	}
	r := &run{ids: slices.Clone(in.IDs), index: make(map[string]uint32, len(in.IDs))}
	for i, id := range r.ids {
		if first, dup := r.index[id]; dup {
			return fmt.Errorf("reboundbolt: custom_id %q is both item %d and item %d", id, first, i)
		}
		r.index[id] = uint32(i)
	}
	return j.submit(ctx, &request{kind: kindPrepare, run: r, digest: in.Digest, opt: opt})
}

// Claim implements batch.Journal. It takes the items from a queue kept in
// memory, and its one write joins the Records' group commit.
func (j *Journal) Claim(ctx context.Context, n int) ([]batch.Claim, error) {
	if _, err := j.prepared("Claim"); err != nil {
		return nil, err
	}
	if n <= 0 {
		return nil, nil
	}
	r := &request{kind: kindClaim, n: n}
	if err := j.submit(ctx, r); err != nil {
		return nil, err
	}
	return r.claims, nil
}

// Record implements batch.Journal. Concurrent calls share a transaction
// (group commit); a call returns when its outcomes are committed, or
// fails whole. Its ctx bounds only the wait to join a commit.
func (j *Journal) Record(ctx context.Context, outcomes []batch.Outcome) error {
	run, err := j.prepared("Record")
	if err != nil {
		return err
	}
	r := &request{kind: kindRecord, outcomes: outcomes, pos: make([]uint32, len(outcomes))}
	for i := range outcomes {
		o := &outcomes[i]
		pos, ok := run.index[o.ID]
		if !ok {
			return fmt.Errorf("reboundbolt: Record of custom_id %q, which is not in the batch", o.ID)
		}
		switch o.State {
		case batch.Pending, batch.Succeeded, batch.Failed, batch.FailedPermanent:
		default:
			return fmt.Errorf("reboundbolt: Record of %q in state %v", o.ID, o.State)
		}
		r.pos[i] = pos
		r.size += outcomeSize(o) + len(o.ID)
	}
	return j.submit(ctx, r)
}

// Outcomes implements batch.Journal: an item has an outcome while it has
// an entry in "outcomes", whatever its state. It reads in one read
// transaction, which sees the journal as it was when Outcomes began; fn
// must not wait for a Record of the same journal, which may be waiting
// for that transaction to end.
func (j *Journal) Outcomes(ctx context.Context, fn func(batch.Outcome) error) error {
	return j.view(func(tx *bolt.Tx) error {
		out := tx.Bucket(outcomesBucket)
		c := tx.Bucket(itemsBucket).Cursor()
		n := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if n++; n%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			pos, ok := keyPos(k)
			if !ok {
				return j.corrupt("item key of %d bytes", len(k))
			}
			s, _, id, err := decodeItem(v)
			if err != nil {
				return j.corrupt("item %d: %v", pos, err)
			}
			// An item Pending or InFlight may hold the outcome it had
			// before it was claimed again; a recorded one must.
			ov := out.Get(k)
			if ov == nil {
				if s >= batch.Succeeded {
					return j.corrupt("item %d (%q) is %v and has no outcome", pos, id, s)
				}
				continue
			}
			o := batch.Outcome{ID: string(id)}
			if err := decodeOutcome(ov, &o); err != nil {
				return j.corrupt("item %d (%q): %v", pos, id, err)
			}
			if s >= batch.Succeeded && o.State != s {
				return j.corrupt("item %d (%q) is %v and its outcome %v", pos, id, s, o.State)
			}
			if err := callerFn(fn, o); err != nil {
				return err
			}
		}
		return nil
	})
}

// callerFn calls fn, marking its panic as the caller's.
func callerFn(fn func(batch.Outcome) error, o batch.Outcome) error {
	defer func() {
		if r := recover(); r != nil {
			panic(callerPanic{r})
		}
	}()
	return fn(o)
}

// Counts implements batch.Journal. After Prepare it answers from memory;
// before, it reads the items (as `rebound batch status` does), and an item
// that a dead run claimed counts InFlight.
func (j *Journal) Counts(ctx context.Context) (batch.Counts, error) {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return batch.Counts{}, errClosed
	}
	if j.run != nil {
		c := j.counts
		j.mu.Unlock()
		return c, nil
	}
	j.mu.Unlock()
	return j.scanCounts(ctx)
}

// scanCounts counts the items' states as the file has them.
func (j *Journal) scanCounts(ctx context.Context) (batch.Counts, error) {
	var c batch.Counts
	err := j.view(func(tx *bolt.Tx) error {
		items := tx.Bucket(itemsBucket)
		if items == nil { // an empty read-only file
			return nil
		}
		cur := items.Cursor()
		for k, v := cur.First(); k != nil; k, v = cur.Next() {
			s, _, _, err := decodeItem(v)
			if err != nil {
				pos, _ := keyPos(k)
				return j.corrupt("item %d: %v", pos, err)
			}
			c.Total++
			*stateCount(&c, s)++
			if c.Total%4096 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	return c, err
}

func stateCount(c *batch.Counts, s batch.State) *int {
	switch s {
	case batch.Pending:
		return &c.Pending
	case batch.InFlight:
		return &c.InFlight
	case batch.Succeeded:
		return &c.Succeeded
	case batch.Failed:
		return &c.Failed
	}
	return &c.FailedPermanent
}

// Close implements batch.Journal: the claims of this run never recorded
// are written back Pending and Resent, and the file's lock is let go.
func (j *Journal) Close() error {
	j.closeOnce.Do(func() {
		j.mu.Lock()
		j.closed = true
		j.mu.Unlock()
		if j.reqs != nil {
			r := &request{kind: kindClose, done: make(chan error, 1)}
			j.reqs <- r
			j.closeErr = <-r.done
			<-j.done
		}
		if err := j.brokenErr(); err != nil {
			// bbolt's Close would wait for the locks it may hold: the
			// file and its map are let go when the process ends.
			j.closeErr = err
			return
		}
		if err := j.db.Close(); err != nil && j.closeErr == nil {
			j.closeErr = fmt.Errorf("reboundbolt: %s: %w", j.path, err)
		}
	})
	return j.closeErr
}

func (j *Journal) writable() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.closed:
		return errClosed
	case j.readOnly:
		return errReadOnly
	}
	return nil
}

func (j *Journal) prepared(method string) (*run, error) {
	if err := j.writable(); err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.run == nil {
		return nil, fmt.Errorf("reboundbolt: %s before Prepare", method)
	}
	return j.run, nil
}

func (j *Journal) view(fn func(*bolt.Tx) error) error {
	j.mu.Lock()
	closed := j.closed
	j.mu.Unlock()
	if closed {
		return errClosed
	}
	if err := j.brokenErr(); err != nil {
		return err
	}
	err := j.guard(func() error { return j.db.View(fn) })
	if errors.Is(err, berrors.ErrDatabaseNotOpen) {
		return errClosed
	}
	return err
}

// guard calls fn, which reads the file through bbolt, and turns a panic of
// bbolt's into ErrCorrupt. Open checked every page, so bbolt panics only
// on a file changed under the journal, or on a page that the disk cannot
// read: a fault in its memory map, which SetPanicOnFault makes a panic.
// bbolt may then hold its locks, so the journal is broken: it fails from
// then on without calling bbolt. A panic of a caller's function that fn
// calls goes on (callerPanic).
func (j *Journal) guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		switch r := recover().(type) {
		case nil:
		case callerPanic:
			panic(r.value)
		default:
			err = j.corrupt("a page could not be read (the file changed while in use, or the disk failed): %v", r)
			j.mu.Lock()
			j.broken = err
			j.mu.Unlock()
		}
	}()
	return fn()
}

// brokenErr returns the error that broke the journal, if one has.
func (j *Journal) brokenErr() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.broken
}

// callerPanic carries a panic of a caller's function through guard.
type callerPanic struct{ value any }

// submit hands r to the writer goroutine and waits for its answer. Once
// the writer has r, submit waits for the commit whatever ctx says: an
// error must mean that nothing was written.
func (j *Journal) submit(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.done = make(chan error, 1)
	select {
	case j.reqs <- r:
	case <-j.done:
		return errClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	return <-r.done
}
