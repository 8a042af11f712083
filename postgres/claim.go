package reboundpg

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/rebound-go/rebound/batch"
)

// Claim hands out up to n items in input order, under a lease of this
// worker's, skipping the rows that other workers are claiming at the same
// instant.
func (j *Journal) Claim(ctx context.Context, n int) ([]batch.Claim, error) {
	j.mu.Lock()
	closed, prepared, since, retry, from := j.closed, j.prepared, j.since, j.retry, j.failFrom
	j.mu.Unlock()
	switch {
	case closed:
		return nil, ErrClosed
	case !prepared:
		return nil, errors.New("reboundpg: Claim before Prepare")
	case n <= 0:
		return nil, nil
	}
	var (
		got    []claimRow
		unsure []claimRow // a claim whose commit went unanswered: it may stand
		start  time.Time  // when the claim that stands began
	)
	err := j.do(ctx, func(ctx context.Context) error {
		if unsure != nil {
			held, err := j.stillHeld(ctx, unsure)
			if err != nil || len(held) > 0 {
				got = held
				return err
			}
			unsure = nil // it was rolled back
		}
		got, start = got[:0], time.Now()
		// In a transaction of its own, so that a connection lost before
		// the commit leaves nothing claimed, and one lost during it leaves
		// the rows to find (stillHeld).
		tx, err := j.pool.Begin(ctx)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, j.sql.claim, j.batch, n, retry, from, since, j.worker, j.holder, j.lease.Microseconds())
		if err == nil {
			var r claimRow
			_, err = pgx.ForEachRow(rows, []any{&r.seq, &r.id, &r.src, &r.failed}, func() error {
				got = append(got, r)
				return nil
			})
		}
		if err != nil {
			tx.Rollback(ctx)
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			if len(got) > 0 {
				unsure = slices.Clone(got)
			}
			return err
		}
		return nil
	})
	if err != nil {
		return nil, j.fail("Claim", err)
	}
	slices.SortFunc(got, func(a, b claimRow) int { return int(a.seq - b.seq) })

	claims := make([]batch.Claim, len(got))
	last, took, failed := int64(-1), int64(0), int64(0)
	for i, r := range got {
		claims[i] = batch.Claim{ID: r.id, Resent: r.src == srcResent}
		failed = r.failed
		if r.src == srcFailed {
			last, took = r.seq, took+1
		}
	}
	j.mu.Lock()
	for _, c := range claims {
		j.held[c.ID] = start
	}
	// The failures recorded before Prepare only ever leave that set, so
	// the next claim can start its scan of them after the last one taken;
	// once fewer than n were left and all were taken, none are.
	switch {
	case failed < int64(n) && took == failed:
		j.failFrom = math.MaxInt32
	case last > j.failFrom:
		j.failFrom = last
	}
	j.mu.Unlock()
	return claims, nil
}

// claimRow is a row the claim statement returns.
type claimRow struct {
	seq    int64
	id     string
	src    int16
	failed int64
}

// stillHeld returns those of rows that this journal holds: the rows of a
// claim whose commit went unanswered, if it was made.
func (j *Journal) stillHeld(ctx context.Context, rows []claimRow) ([]claimRow, error) {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.id
	}
	res, err := j.pool.Query(ctx, j.sql.held, j.batch, ids, j.holder)
	if err != nil {
		return nil, err
	}
	held := map[string]bool{}
	var id string
	if _, err := pgx.ForEachRow(res, []any{&id}, func() error { held[id] = true; return nil }); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(slices.Clone(rows), func(r claimRow) bool { return !held[r.id] }), nil
}

// renewer renews this worker's leases every third of a lease while it
// holds any, until Close. A renewal that fails on its connection is tried
// again on fresh ones until the leases run out (Journal.do); if none
// succeeds, the items go to other workers, and this worker's Records still
// count.
func (j *Journal) renewer() {
	defer j.done.Done()
	t := time.NewTicker(j.lease / 3)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
		}
		// Taken before the ids: a claim made after it is renewed at least
		// as late as it says.
		start := time.Now()
		j.mu.Lock()
		ids := heldIDs(j.held)
		j.mu.Unlock()
		if len(ids) == 0 {
			continue
		}
		// Close cancels a renewal under way rather than wait for it.
		err := j.do(j.renewCtx, func(ctx context.Context) error {
			_, err := j.pool.Exec(ctx, j.sql.renew, j.batch, ids, j.holder, j.lease.Microseconds())
			return err
		})
		if err != nil {
			continue
		}
		j.mu.Lock()
		for _, id := range ids {
			if at, ok := j.held[id]; ok && at.Before(start) {
				j.held[id] = start
			}
		}
		j.mu.Unlock()
	}
}

func heldIDs(held map[string]time.Time) []string {
	ids := make([]string, 0, len(held))
	for id := range held {
		ids = append(ids, id)
	}
	return ids
}
