package reboundbolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

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
