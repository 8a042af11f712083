package reboundpg

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// An item's state is stored as the number of its batch.State.
//
// The sources of a claimed row, as the claim statement returns them.
const (
	srcPending = 0 // Pending: never sent, or given back by a Record
	srcResent  = 1 // InFlight under a lease that ran out or was given back by Close
	srcFailed  = 2 // recorded Failed (or FailedPermanent) before Prepare
)

// statements are the SQL of a Journal, with its schema's name quoted in.
type statements struct {
	items                                                  pgx.Identifier
	ready, create                                          string
	insertBatch, digest, analyze                           string
	claim, held, record, giveBack, renew, counts, outcomes string
}

func newStatements(schema string) statements {
	q := pgx.Identifier{schema}.Sanitize()
	r := strings.NewReplacer("S.", q+".", "$schema", q, "$lit", quoteLiteral(q))
	s := statements{items: pgx.Identifier{schema, "items"}}

	s.ready = r.Replace(`SELECT to_regclass($lit || '.items') IS NOT NULL AND to_regclass($lit || '.batches') IS NOT NULL`)

	// One row per batch, one per item. Succeeded (2) rows are never
	// claimed again, so the two partial indexes that claims scan hold only
	// what may be claimable: Pending and InFlight rows (0, 1), and failed
	// ones (3, 4).
	s.create = r.Replace(`
CREATE SCHEMA IF NOT EXISTS $schema;
CREATE TABLE IF NOT EXISTS S.batches (
	name    text PRIMARY KEY,
	digest  text NOT NULL,
	items   integer NOT NULL,
	created timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS S.items (
	batch         text NOT NULL,
	seq           integer NOT NULL,
	id            text NOT NULL,
	state         smallint NOT NULL DEFAULT 0,
	worker        text,
	holder        bigint,
	lease_until   timestamptz,
	recorded_at   timestamptz,
	status_code   integer,
	request_id    text,
	body          bytea,
	error_code    text,
	error_message text,
	attempts      integer,
	outcome       smallint,
	PRIMARY KEY (batch, seq),
	UNIQUE (batch, id)
);
CREATE INDEX IF NOT EXISTS items_open ON S.items (batch, seq) WHERE state IN (0, 1);
CREATE INDEX IF NOT EXISTS items_failed ON S.items (batch, seq) WHERE state IN (3, 4);
`)

	s.insertBatch = r.Replace(`INSERT INTO S.batches (name, digest, items) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`)
	s.analyze = r.Replace(`ANALYZE S.items`)
	s.digest = r.Replace(`SELECT digest FROM S.batches WHERE name = $1`)

	// claim takes the first n claimable rows of each kind, skipping those
	// that other claims hold locked, merges them in input order and marks
	// the first n InFlight under this worker's lease. It returns each row's
	// source and how many failed rows the scan found, for the next scan's
	// start ($4).
	//
	// $1 batch, $2 n, $3 RetryFailed, $4 seq to scan failures after,
	// $5 Prepare's time, $6 worker, $7 holder, $8 lease in µs.
	s.claim = r.Replace(`
WITH open AS MATERIALIZED (
	SELECT seq, state AS src FROM S.items
	WHERE batch = $1 AND state IN (0, 1) AND (state = 0 OR lease_until <= now())
	ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED
), failed AS MATERIALIZED (
	SELECT seq, 2::smallint AS src FROM S.items
	WHERE batch = $1 AND state IN (3, 4) AND (state = 3 OR $3::boolean) AND seq > $4 AND recorded_at < $5
	ORDER BY seq LIMIT $2 FOR UPDATE SKIP LOCKED
), pick AS (
	SELECT seq, src FROM (SELECT * FROM open UNION ALL SELECT * FROM failed) u ORDER BY seq LIMIT $2
)
UPDATE S.items i SET state = 1, worker = $6, holder = $7, lease_until = now() + $8::bigint * interval '1 microsecond'
FROM pick WHERE i.batch = $1 AND i.seq = pick.seq
RETURNING i.seq::bigint, i.id, pick.src, (SELECT count(*) FROM failed)`)

	// held finds which of the rows of a claim whose commit went unanswered
	// this journal holds. $1 batch, $2 ids, $3 holder.
	s.held = r.Replace(`SELECT id FROM S.items WHERE batch = $1 AND id = ANY($2) AND state = 1 AND holder = $3`)

	// record writes a group of outcomes, one per id. A success stands
	// (state 2 is never written over); a give-back (state 0) applies only
	// to a row this journal holds, and leaves the row's last outcome as it
	// was. outcome is the state of the row's last outcome, which a claim
	// leaves alone: Outcomes lists a row claimed again by it.
	//
	// $1 batch, $2 holder, then the outcomes' columns as arrays.
	s.record = r.Replace(`
UPDATE S.items i SET
	state         = u.state,
	lease_until   = NULL,
	recorded_at   = CASE WHEN u.state = 0 THEN i.recorded_at ELSE now() END,
	status_code   = CASE WHEN u.state = 0 THEN i.status_code ELSE u.status_code END,
	request_id    = CASE WHEN u.state = 0 THEN i.request_id ELSE u.request_id END,
	body          = CASE WHEN u.state = 0 THEN i.body ELSE u.body END,
	error_code    = CASE WHEN u.state = 0 THEN i.error_code ELSE u.error_code END,
	error_message = CASE WHEN u.state = 0 THEN i.error_message ELSE u.error_message END,
	attempts      = CASE WHEN u.state = 0 THEN i.attempts ELSE u.attempts END,
	outcome       = CASE WHEN u.state = 0 THEN i.outcome ELSE u.state END
FROM unnest($3::text[], $4::smallint[], $5::integer[], $6::text[], $7::bytea[], $8::text[], $9::text[], $10::integer[])
	AS u(id, state, status_code, request_id, body, error_code, error_message, attempts)
WHERE i.batch = $1 AND i.id = u.id AND i.state <> 2 AND (u.state <> 0 OR (i.state = 1 AND i.holder = $2))`)

	// giveBack ends this journal's leases now: its rows stay InFlight,
	// which makes their next claim Resent, under a lease that has run out.
	s.giveBack = r.Replace(`UPDATE S.items SET lease_until = '-infinity' WHERE batch = $1 AND id = ANY($2) AND state = 1 AND holder = $3`)
	s.renew = r.Replace(`UPDATE S.items SET lease_until = now() + $4::bigint * interval '1 microsecond' WHERE batch = $1 AND id = ANY($2) AND state = 1 AND holder = $3`)

	s.counts = r.Replace(`
SELECT count(*),
	count(*) FILTER (WHERE state = 0 OR (state = 1 AND lease_until <= now())),
	count(*) FILTER (WHERE state = 1 AND lease_until > now()),
	count(*) FILTER (WHERE state = 2),
	count(*) FILTER (WHERE state = 3),
	count(*) FILTER (WHERE state = 4)
FROM S.items WHERE batch = $1`)

	s.outcomes = r.Replace(`
SELECT seq::bigint, id, outcome, coalesce(status_code, 0), coalesce(request_id, ''), body,
	coalesce(error_code, ''), coalesce(error_message, ''), coalesce(attempts, 0)
FROM S.items WHERE batch = $1 AND seq > $2 AND outcome IS NOT NULL
ORDER BY seq LIMIT $3`)
	return s
}

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// createSchema creates the schema, tables and indexes if they are
// missing. Workers starting at once would race on CREATE ... IF NOT
// EXISTS (which is not safe against itself), so the DDL runs under an
// advisory lock; a schema that is complete is left alone, so that a
// worker needs no right to create anything once it exists.
func (j *Journal) createSchema(ctx context.Context, schema string) error {
	fail := func(err error) error {
		return j.redact(fmt.Errorf("reboundpg: creating the tables in schema %q: %w", schema, err))
	}
	var ready bool
	if err := j.pool.QueryRow(ctx, j.sql.ready).Scan(&ready); err != nil {
		return fail(err)
	}
	if ready {
		return nil
	}
	err := pgx.BeginFunc(ctx, j.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, "reboundpg schema "+schema); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, j.sql.create)
		return err
	})
	if err != nil {
		return fail(err)
	}
	return nil
}
