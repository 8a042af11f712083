package reboundpg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rebound-go/rebound/batch"
)

// A write is one Record call waiting for the writer.
type write struct {
	outcomes []batch.Outcome
	size     int        // bytes of its bodies, for the group's bound
	taken    bool       // guarded by Journal.mu: the writer has it; the caller waits for its result
	done     chan error // buffered: the writer never waits on a caller that left
}

// A group takes writes from the queue until it holds this many outcomes
// or bytes of bodies (at least one write, however large): enough that
// 64 concurrent Records share a transaction, few enough that one
// statement's arrays stay a few MiB.
const (
	groupOutcomes = 256
	groupBytes    = 8 << 20
)

// Record hands outcomes to the journal's writer, which writes the Records
// waiting at that moment together, in one statement and one transaction
// (group commit), and waits for it. The outcomes are written all or none.
// If ctx ends before the writer takes them, none are written; once taken,
// Record waits for the transaction to end, so that its error says truly
// whether they were written.
func (j *Journal) Record(ctx context.Context, outcomes []batch.Outcome) error {
	for _, o := range outcomes {
		if o.State == batch.InFlight || o.State > batch.FailedPermanent {
			return fmt.Errorf("reboundpg: Record of %q: state %v is not an outcome", o.ID, o.State)
		}
	}
	if len(outcomes) == 0 {
		return nil
	}
	w := &write{outcomes: outcomes, done: make(chan error, 1)}
	for _, o := range outcomes {
		w.size += len(o.Body)
	}
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return ErrClosed
	}
	j.queue = append(j.queue, w)
	j.mu.Unlock()
	select {
	case j.wake <- struct{}{}:
	default: // the writer already knows there is work
	}

	select {
	case err := <-w.done:
		return err
	case <-ctx.Done():
	}
	j.mu.Lock()
	if !w.taken {
		j.queue = slices.DeleteFunc(j.queue, func(q *write) bool { return q == w })
		j.mu.Unlock()
		return ctx.Err()
	}
	j.mu.Unlock()
	return <-w.done
}

// writer writes the queue's Records, a group at a time, until Close; then
// it writes what is left in the queue and returns.
func (j *Journal) writer() {
	defer j.done.Done()
	for {
		for {
			g := j.takeGroup()
			if len(g) == 0 {
				break
			}
			j.writeGroup(g)
		}
		select {
		case <-j.wake:
		case <-j.stop:
			for g := j.takeGroup(); len(g) > 0; g = j.takeGroup() {
				j.writeGroup(g)
			}
			return
		}
	}
}

// takeGroup takes the next group of writes off the queue.
func (j *Journal) takeGroup() []*write {
	j.mu.Lock()
	defer j.mu.Unlock()
	n, outcomes, size := 0, 0, 0
	for _, w := range j.queue {
		if n > 0 && (outcomes+len(w.outcomes) > groupOutcomes || size+w.size > groupBytes) {
			break
		}
		w.taken = true
		n, outcomes, size = n+1, outcomes+len(w.outcomes), size+w.size
	}
	g := slices.Clone(j.queue[:n])
	j.queue = slices.Delete(j.queue, 0, n)
	return g
}

// writeGroup writes a group in one transaction and tells each write how
// it went. If the server refuses the group (one outcome it cannot store,
// say), each write is tried alone, so that only the bad one fails.
func (j *Journal) writeGroup(g []*write) {
	err := j.writeOutcomes(g)
	var pgErr *pgconn.PgError
	if err != nil && len(g) > 1 && !transient(err) && errors.As(err, &pgErr) {
		for _, w := range g {
			j.finish(w, j.writeOutcomes([]*write{w}))
		}
		return
	}
	for _, w := range g {
		j.finish(w, err)
	}
}

// finish tells a write its result; a written one's items are no longer
// this journal's to renew or give back.
func (j *Journal) finish(w *write, err error) {
	if err == nil {
		j.mu.Lock()
		for _, o := range w.outcomes {
			delete(j.held, o.ID)
		}
		j.mu.Unlock()
		w.done <- nil
		return
	}
	w.done <- j.fail("Record", err)
}

// writeOutcomes writes the outcomes of writes in one statement. An id
// may come twice (a late outcome after the first): the statement can
// apply only one per row, so the one that applying them in turn would
// leave is chosen here, the first success or else the last failure or
// else a give-back.
func (j *Journal) writeOutcomes(ws []*write) error {
	var all []batch.Outcome
	for _, w := range ws {
		all = append(all, w.outcomes...)
	}
	index := make(map[string]int, len(all))
	var final []batch.Outcome
	for _, o := range all {
		i, seen := index[o.ID]
		switch {
		case !seen:
			index[o.ID] = len(final)
			final = append(final, o)
		case final[i].State == batch.Succeeded:
		case o.State != batch.Pending || final[i].State == batch.Pending:
			final[i] = o
		}
	}
	n := len(final)
	var (
		ids, requestIDs, errorCodes, errorMessages = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		states                                     = make([]int16, n)
		codes, attempts                            = make([]int32, n), make([]int32, n)
		bodies                                     = make([][]byte, n)
	)
	for i, o := range final {
		ids[i], states[i], codes[i], attempts[i], bodies[i] = o.ID, int16(o.State), int32(o.StatusCode), int32(o.Attempts), o.Body
		requestIDs[i], errorCodes[i], errorMessages[i] = text(o.RequestID), text(o.ErrorCode), text(o.ErrorMessage)
	}
	// Written again, the statement leaves the rows as it did once: a
	// success stands, and a give-back applies to a row still held.
	return j.do(context.Background(), func(ctx context.Context) error {
		_, err := j.pool.Exec(ctx, j.sql.record, j.batch, j.holder, ids, states, codes, requestIDs, bodies, errorCodes, errorMessages, attempts)
		return err
	})
}

// text makes s storable in a text column, which takes neither invalid
// UTF-8 nor NUL: a provider's odd error message must not fail the
// outcomes written with it.
func text(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", "")
}
