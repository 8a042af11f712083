package reboundbolt

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/rebound-go/rebound/batch"
)

// One goroutine, the writer, makes every change to the file and to the
// state of the items kept in memory. Whatever requests are waiting when it
// starts a transaction go into that transaction (group commit): while one
// commit is on its way to the file, the Records that arrive queue up and
// share the next. Nothing waits on a timer, so a lone Record commits at
// once.
//
// The writer is the only reader and writer of Journal.w; it publishes the
// counts and the run under Journal.mu once they are committed.

type kind uint8

const (
	kindPrepare kind = iota
	kindClaim
	kindRecord
	kindClose
)

type request struct {
	kind kind
	done chan error

	// kindPrepare
	run    *run
	digest string
	opt    batch.Options

	// kindClaim
	n      int
	claims []batch.Claim

	// kindRecord
	outcomes []batch.Outcome
	pos      []uint32 // the outcomes' positions
	size     int      // about how many bytes it writes
}

// A group holds at most maxGroup requests and, past maxGroupBytes, no
// more: a transaction keeps everything it writes in memory until it
// commits.
const (
	maxGroup      = 1024
	maxGroupBytes = 16 << 20
)

// flagQueued, in writer.flags (never in the file), says that the item is
// claimable and in the queue.
const flagQueued = 1 << 7

type writer struct {
	run    *run
	states []batch.State
	flags  []uint8
	// queue holds the positions of claimable items, smallest first, so
	// that claims go in input order. It may also hold positions whose
	// item is no longer queued (flagQueued clear): they are skipped.
	queue posHeap
	undo  []change // this transaction's changes, to undo if it fails
	buf   []byte   // keys and values of this transaction
	group []*request

	commits int // transactions committed, for BenchmarkJournal
}

// change is one change of an item's state, kept to undo it if its
// transaction fails, and to update the counts once it commits.
type change struct {
	pos      uint32
	from, to batch.State
	flags    uint8 // before
}

type posHeap []uint32

func (h posHeap) Len() int           { return len(h) }
func (h posHeap) Less(i, k int) bool { return h[i] < h[k] }
func (h posHeap) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *posHeap) Push(x any)        { *h = append(*h, x.(uint32)) }
func (h *posHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (j *Journal) write() {
	defer close(j.done)
	var next *request
	for {
		r := next
		next = nil
		if r == nil {
			r = <-j.reqs
		}
		if err := j.brokenErr(); err != nil {
			r.done <- err
			if r.kind == kindClose {
				return
			}
			continue
		}
		switch r.kind {
		case kindPrepare:
			r.done <- j.guard(func() error { return j.prepare(r) })
			continue
		case kindClose:
			r.done <- j.guard(j.closeRun)
			return
		}
		group := append(j.w.group[:0], r)
		size := r.size
		// Workers that are runnable but not yet at the channel get to
		// it before the transaction begins: on few CPUs this doubles
		// the size of a group, and costs nothing when none are.
		runtime.Gosched()
	drain:
		for len(group) < maxGroup && size < maxGroupBytes {
			select {
			case r := <-j.reqs:
				if r.kind == kindPrepare || r.kind == kindClose {
					next = r
					break drain
				}
				group = append(group, r)
				size += r.size
			default:
				break drain
			}
		}
		j.commit(group)
		clear(group)
		j.w.group = group[:0]
	}
}

// commit applies group in one transaction or, if that fails, each request
// in its own, so that one request's failure is not the others'.
func (j *Journal) commit(group []*request) {
	err := j.update(group)
	if err == nil || len(group) == 1 || j.brokenErr() != nil {
		for _, r := range group {
			r.done <- err
		}
		return
	}
	for _, r := range group {
		r.done <- j.update([]*request{r})
	}
}

func (j *Journal) update(group []*request) error {
	w := &j.w
	w.undo = w.undo[:0]
	w.buf = w.buf[:0]
	var tx *bolt.Tx
	err := j.guard(func() error {
		var err error
		if tx, err = j.db.Begin(true); err != nil {
			return err
		}
		items, outcomes := tx.Bucket(itemsBucket), tx.Bucket(outcomesBucket)
		for _, r := range group {
			var err error
			if r.kind == kindClaim {
				err = j.applyClaim(items, r)
			} else {
				err = j.applyRecord(items, outcomes, r)
			}
			if err != nil {
				return err
			}
		}
		return tx.Commit()
	})
	if err != nil && tx != nil && tx.DB() != nil { // neither committed nor rolled back by a failed commit
		j.guard(tx.Rollback)
	}
	if cap(w.buf) > 4*maxGroupBytes {
		w.buf = nil // after a group of huge bodies
	}
	if err != nil {
		j.rollback()
		for _, r := range group {
			r.claims = nil
		}
		if errors.Is(err, ErrCorrupt) {
			return err
		}
		return fmt.Errorf("reboundbolt: %s: %w", j.path, err)
	}
	w.commits++
	j.mu.Lock()
	for _, c := range w.undo {
		*stateCount(&j.counts, c.from)--
		*stateCount(&j.counts, c.to)++
	}
	j.mu.Unlock()
	return nil
}

// rollback undoes the changes in memory of a transaction that failed.
func (j *Journal) rollback() {
	w := &j.w
	for i := len(w.undo) - 1; i >= 0; i-- {
		c := w.undo[i]
		w.states[c.pos], w.flags[c.pos] = c.from, c.flags
		if c.flags&flagQueued != 0 {
			heap.Push(&w.queue, c.pos) // it may be there twice: see writer.queue
		}
	}
	w.undo = w.undo[:0]
}

// set changes an item's state and flags, in memory and in tx.
func (j *Journal) set(items *bolt.Bucket, pos uint32, s batch.State, flags uint8) error {
	w := &j.w
	from, fromFlags := w.states[pos], w.flags[pos]
	w.undo = append(w.undo, change{pos: pos, from: from, to: s, flags: fromFlags})
	w.states[pos], w.flags[pos] = s, flags
	if s == from && flags&flagResent == fromFlags&flagResent {
		return nil
	}
	start := len(w.buf)
	w.buf = putKey(w.buf, pos)
	mid := len(w.buf)
	w.buf = appendItem(w.buf, s, flags&flagResent, w.run.ids[pos])
	return items.Put(w.buf[start:mid:mid], w.buf[mid:len(w.buf):len(w.buf)])
}

func (j *Journal) key(pos uint32) []byte {
	w := &j.w
	start := len(w.buf)
	w.buf = putKey(w.buf, pos)
	return w.buf[start:len(w.buf):len(w.buf)]
}

func (j *Journal) applyClaim(items *bolt.Bucket, r *request) error {
	w := &j.w
	r.claims = make([]batch.Claim, 0, min(r.n, w.queue.Len()))
	for len(r.claims) < r.n && w.queue.Len() > 0 {
		pos := heap.Pop(&w.queue).(uint32)
		flags := w.flags[pos]
		if flags&flagQueued == 0 {
			continue
		}
		// An earlier failure stays in "outcomes": it is the item's last
		// outcome until a new one is recorded.
		if err := j.set(items, pos, batch.InFlight, flags&^flagQueued); err != nil {
			return err
		}
		r.claims = append(r.claims, batch.Claim{ID: w.run.ids[pos], Resent: flags&flagResent != 0})
	}
	return nil
}

func (j *Journal) applyRecord(items, outcomes *bolt.Bucket, r *request) error {
	w := &j.w
	for i := range r.outcomes {
		o, pos := &r.outcomes[i], r.pos[i]
		from, flags := w.states[pos], w.flags[pos]
		switch {
		case from == batch.Succeeded:
			// The first success stands.
		case o.State == batch.Pending:
			if from == batch.Pending && flags&flagQueued != 0 {
				continue
			}
			// A claim given back keeps its Resent (whatever made it
			// resent is still true) and its last outcome, if any.
			if err := j.set(items, pos, batch.Pending, flags|flagQueued); err != nil {
				return err
			}
			if flags&flagQueued == 0 {
				heap.Push(&w.queue, pos)
			}
		default:
			k := j.key(pos)
			start := len(w.buf)
			w.buf = appendOutcome(w.buf, o)
			if err := outcomes.Put(k, w.buf[start:len(w.buf):len(w.buf)]); err != nil {
				return err
			}
			if err := j.set(items, pos, o.State, flags&^(flagResent|flagQueued)); err != nil {
				return err
			}
		}
	}
	return nil
}

// prepare ties the journal to r.run: a new journal takes its items, one of
// the same input is resumed.
func (j *Journal) prepare(r *request) error {
	j.mu.Lock()
	again := j.run != nil
	j.mu.Unlock()
	if again {
		return fmt.Errorf("reboundbolt: Prepare called twice")
	}
	ids := r.run.ids
	states := make([]batch.State, len(ids))
	flags := make([]uint8, len(ids))
	err := j.db.Update(func(tx *bolt.Tx) error {
		meta, items := tx.Bucket(metaBucket), tx.Bucket(itemsBucket)
		if meta.Get(keyTotal) == nil {
			if k, _ := items.Cursor().First(); k != nil {
				return j.corrupt("items without a digest")
			}
			if err := meta.Put(keyDigest, []byte(r.digest)); err != nil {
				return err
			}
			if err := meta.Put(keyTotal, putUvarint(uint64(len(ids)))); err != nil {
				return err
			}
			items.FillPercent = 1 // keys come in order: fill the pages
			// bbolt keeps the values it is given until the commit:
			// they share one buffer that nothing reuses.
			size := 0
			for _, id := range ids {
				size += 2 + len(id)
			}
			buf := make([]byte, 0, size)
			var key [4]byte
			for i, id := range ids {
				start := len(buf)
				buf = appendItem(buf, batch.Pending, 0, id)
				if err := items.Put(putKey(key[:0], uint32(i)), buf[start:]); err != nil {
					return err
				}
			}
			return nil
		}
		if string(meta.Get(keyDigest)) != r.digest {
			return fmt.Errorf("reboundbolt: %s: %w", j.path, batch.ErrDifferentInput)
		}
		total, n := binary.Uvarint(meta.Get(keyTotal))
		if n <= 0 {
			return j.corrupt("no item count")
		}
		if total != uint64(len(ids)) {
			return fmt.Errorf("reboundbolt: %s: %w (the same digest, but %d items in the journal and %d in the input)", j.path, batch.ErrDifferentInput, total, len(ids))
		}
		var resent []uint32
		c := items.Cursor()
		i := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			pos, ok := keyPos(k)
			if !ok || pos != uint32(i) || i >= len(ids) {
				return j.corrupt("item %d has key %x", i, k)
			}
			s, f, id, err := decodeItem(v)
			if err != nil {
				return j.corrupt("item %d: %v", pos, err)
			}
			if string(id) != ids[i] {
				return fmt.Errorf("reboundbolt: %s: %w (the same digest, but item %d is %q in the journal and %q in the input)", j.path, batch.ErrDifferentInput, i, id, ids[i])
			}
			if s == batch.InFlight {
				// Its run died holding it.
				s, f = batch.Pending, f|flagResent
				resent = append(resent, pos)
			}
			states[i], flags[i] = s, f
			i++
		}
		if i != len(ids) {
			return j.corrupt("%d items of %d", i, len(ids))
		}
		for _, pos := range resent {
			v := appendItem(nil, batch.Pending, flagResent, ids[pos])
			if err := items.Put(putKey(nil, pos), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	var counts batch.Counts
	queue := make(posHeap, 0, len(ids))
	for i, s := range states {
		counts.Total++
		*stateCount(&counts, s)++
		if s == batch.Pending || s == batch.Failed || (s == batch.FailedPermanent && r.opt.RetryFailed) {
			flags[i] |= flagQueued
			queue = append(queue, uint32(i)) // in order: a heap already
		}
	}
	j.w.run, j.w.states, j.w.flags, j.w.queue = r.run, states, flags, queue
	j.mu.Lock()
	j.run, j.counts = r.run, counts
	j.mu.Unlock()
	return nil
}

// closeRun writes back the claims never recorded as Pending and Resent.
func (j *Journal) closeRun() error {
	w := &j.w
	if w.run == nil || !slices.Contains(w.states, batch.InFlight) {
		return nil
	}
	err := j.db.Update(func(tx *bolt.Tx) error {
		items := tx.Bucket(itemsBucket)
		for pos, s := range w.states {
			if s != batch.InFlight {
				continue
			}
			if err := items.Put(putKey(nil, uint32(pos)), appendItem(nil, batch.Pending, flagResent, w.run.ids[pos])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reboundbolt: %s: giving back claims: %w", j.path, err)
	}
	return nil
}

func putUvarint(v uint64) []byte { return binary.AppendUvarint(nil, v) }
