package reboundbolt

import (
	"context"
	"errors"
	"runtime/debug"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/rebound-go/rebound/batch"
)

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
