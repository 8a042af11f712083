package reboundbolt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

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
