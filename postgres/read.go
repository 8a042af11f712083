package reboundpg

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/rebound-go/rebound/batch"
)

// Counts counts the batch's items by state; an item whose lease ran out
// is Pending.
func (j *Journal) Counts(ctx context.Context) (batch.Counts, error) {
	if j.isClosed() {
		return batch.Counts{}, ErrClosed
	}
	var c batch.Counts
	err := j.do(ctx, func(ctx context.Context) error {
		return j.pool.QueryRow(ctx, j.sql.counts, j.batch).Scan(&c.Total, &c.Pending, &c.InFlight, &c.Succeeded, &c.Failed, &c.FailedPermanent)
	})
	if err != nil {
		return batch.Counts{}, j.fail("Counts", err)
	}
	return c, nil
}

// outcomesPage is how many rows one query of Outcomes reads: the rows
// stream, but a short query holds no snapshot for the length of the
// caller's writing.
const outcomesPage = 500

// Outcomes streams each item's last recorded outcome in input order, a
// page of rows at a time: an item claimed again, or given back, keeps the
// one it had until its next.
func (j *Journal) Outcomes(ctx context.Context, fn func(batch.Outcome) error) error {
	if j.isClosed() {
		return ErrClosed
	}
	for after := int64(-1); ; {
		var (
			n     int
			fnErr error
		)
		// A page that fails on its connection is read again from the row
		// after the last one fn had; a page that ends short is the last.
		err := j.do(ctx, func(ctx context.Context) error {
			n = 0
			rows, err := j.pool.Query(ctx, j.sql.outcomes, j.batch, after, outcomesPage)
			if err != nil {
				return err
			}
			var (
				o     batch.Outcome
				seq   int64
				state int16
				code  int32
				att   int32
			)
			_, err = pgx.ForEachRow(rows, []any{&seq, &o.ID, &state, &code, &o.RequestID, &o.Body, &o.ErrorCode, &o.ErrorMessage, &att}, func() error {
				n++
				o.State, o.StatusCode, o.Attempts = batch.State(state), int(code), int(att)
				if fnErr = fn(o); fnErr != nil {
					return fnErr
				}
				after = seq
				o.Body = nil // a fresh slice for the next row: fn may keep this one
				return nil
			})
			if fnErr != nil {
				return nil
			}
			return err
		})
		if fnErr != nil {
			return fnErr
		}
		if err != nil {
			return j.fail("Outcomes", err)
		}
		if n < outcomesPage {
			return nil
		}
	}
}
