package reboundpg

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rebound-go/rebound/batch"
)

// ErrClosed is the error of a Journal's methods called after Close.
var ErrClosed = errors.New("reboundpg: the journal is closed")

// Config says which batch a Journal keeps, where, and for whom.
type Config struct {
	// Batch is the batch's name, which the workers of one batch share and
	// the rows of many batches in one schema keep apart. It is required:
	// it is all that a journal opened only to watch a batch (Counts,
	// Outcomes, without Prepare) has to find it, and a default would let
	// unrelated runs meet under one name.
	Batch string

	// Schema is where the tables live; it and they are created if missing.
	// The default is "rebound".
	Schema string

	// Worker is this worker's name, written in the leases it holds so that
	// an operator can see who holds what. The default is the host's name,
	// the process id and a random suffix.
	Worker string

	// Lease is how long a claim holds without renewal. While the journal
	// holds claims, it renews them every Lease/3; a worker that dies stops
	// renewing, and its items are claimable again, as Resent, when their
	// lease runs out. It also bounds how long a statement that fails on
	// its connection is tried again (until the leases held run out; see
	// the package documentation). The default is 30 seconds.
	Lease time.Duration
}

// DefaultSchema is the schema of a Config whose Schema is empty.
const DefaultSchema = "rebound"

// DefaultLease is the lease of a Config whose Lease is zero.
const DefaultLease = 30 * time.Second

// writeTimeout bounds each try of a statement: a PostgreSQL that stops
// answering fails it after that, and it is tried again on a fresh
// connection (Journal.do), instead of hanging the run.
const writeTimeout = 30 * time.Second

// Journal is a batch.Journal on PostgreSQL, shared by any number of
// workers. Open it with Open; its methods are safe for concurrent use.
type Journal struct {
	pool   *pgxpool.Pool
	batch  string
	worker string
	holder int64 // this Journal value's mark on the rows it claims; Worker names may repeat
	lease  time.Duration
	sql    statements
	redact func(error) error

	wake     chan struct{} // tells the writer that the queue has work
	stop     chan struct{} // closed by Close: the writer drains the queue and returns, the renewer returns
	renewCtx context.Context
	cancel   context.CancelFunc // ends renewCtx, at Close
	done     sync.WaitGroup
	closeErr error
	once     sync.Once

	mu       sync.Mutex
	prepared bool                 // guarded by mu
	since    time.Time            // guarded by mu: the database's time at Prepare
	retry    bool                 // guarded by mu: Options.RetryFailed
	failFrom int64                // guarded by mu: the seq below which no failure recorded before Prepare is left
	held     map[string]time.Time // guarded by mu: ids claimed by this journal and not yet recorded, with when their lease was last set, at the latest
	queue    []*write             // guarded by mu: Records waiting for the writer
	closed   bool                 // guarded by mu
	away     bool                 // guarded by mu: a statement gave up on the database, and none has succeeded since
}

var _ batch.Journal = (*Journal)(nil)

// Open connects to the PostgreSQL that url names (a postgres:// URL or a
// key=value string, as pgx takes them), creates cfg.Schema and its tables
// if missing, and returns a Journal of cfg.Batch. Errors never repeat the
// URL's password.
func Open(ctx context.Context, url string, cfg Config) (*Journal, error) {
	redact := redactor(url)
	if cfg.Batch == "" {
		return nil, errors.New("reboundpg: Config.Batch is empty: name the batch")
	}
	if cfg.Lease < 0 {
		return nil, fmt.Errorf("reboundpg: Config.Lease is negative (%v)", cfg.Lease)
	}
	if cfg.Schema == "" {
		cfg.Schema = DefaultSchema
	}
	if cfg.Lease == 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Worker == "" {
		cfg.Worker = defaultWorker()
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, redact(fmt.Errorf("reboundpg: %w", err))
	}
	if pw := pc.ConnConfig.Password; pw != "" {
		redact = redactor(url, pw)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, redact(fmt.Errorf("reboundpg: %w", err))
	}
	j := &Journal{
		pool:   pool,
		batch:  cfg.Batch,
		worker: cfg.Worker,
		holder: randomInt63(),
		lease:  cfg.Lease,
		sql:    newStatements(cfg.Schema),
		redact: redact,
		wake:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		held:   make(map[string]time.Time),
	}
	j.renewCtx, j.cancel = context.WithCancel(context.Background())
	if err := j.createSchema(ctx, cfg.Schema); err != nil {
		j.cancel()
		pool.Close()
		return nil, err
	}
	j.done.Add(2)
	go j.writer()
	go j.renewer()
	return j, nil
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

// Prepare ties the journal to in. The first worker to prepare a batch
// fills it; the others, at once or later, find it filled and compare
// digests. Claims that an earlier run never recorded become claimable
// again when their lease runs out (at once if that run was closed).
func (j *Journal) Prepare(ctx context.Context, in batch.Input, opt batch.Options) error {
	if j.isClosed() {
		return ErrClosed
	}
	var since time.Time
	filled := false
	err := j.do(ctx, func(ctx context.Context) error {
		filled = false
		return pgx.BeginFunc(ctx, j.pool, func(tx pgx.Tx) error {
			// A second worker's insert waits here for the first one's
			// transaction, then finds its row: one fills, the others
			// compare.
			tag, err := tx.Exec(ctx, j.sql.insertBatch, j.batch, in.Digest, len(in.IDs))
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 1 {
				rows := make([][]any, len(in.IDs))
				for i, id := range in.IDs {
					rows[i] = []any{j.batch, int32(i), id}
				}
				if _, err := tx.CopyFrom(ctx, j.sql.items, []string{"batch", "seq", "id"}, pgx.CopyFromRows(rows)); err != nil {
					return err
				}
				filled = true
			} else {
				var digest string
				if err := tx.QueryRow(ctx, j.sql.digest, j.batch).Scan(&digest); err != nil {
					return err
				}
				if digest != in.Digest {
					return fmt.Errorf("reboundpg: batch %q: %w", j.batch, batch.ErrDifferentInput)
				}
			}
			return tx.QueryRow(ctx, `SELECT now()`).Scan(&since)
		})
	})
	if err != nil {
		if errors.Is(err, batch.ErrDifferentInput) {
			return err
		}
		return j.fail("Prepare", err)
	}
	if filled {
		// Without statistics on the rows just added, the planner takes
		// the claims' partial index for nearly empty and sorts the whole
		// batch at every claim instead of reading the index in order. A
		// worker that does not own the table gets a warning, not an
		// error, and the statistics of autovacuum's next pass.
		err := j.do(ctx, func(ctx context.Context) error {
			_, err := j.pool.Exec(ctx, j.sql.analyze)
			return err
		})
		if err != nil {
			return j.fail("Prepare", err)
		}
	}
	j.mu.Lock()
	j.prepared, j.since, j.retry, j.failFrom = true, since, opt.RetryFailed, -1
	j.mu.Unlock()
	return nil
}

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

// Close stops the renewer, waits for the Records under way, gives back
// this worker's unrecorded claims (claimable by others at once, as
// Resent) and closes the connections. It returns the first error of
// giving them back; a second Close returns the same.
func (j *Journal) Close() error {
	j.once.Do(func() {
		j.mu.Lock()
		j.closed = true
		j.mu.Unlock()
		close(j.stop)
		j.cancel()
		j.done.Wait()

		j.mu.Lock()
		ids := heldIDs(j.held)
		j.mu.Unlock()
		if len(ids) > 0 {
			// Tried until the leases run out, as they then give the
			// claims back themselves.
			err := j.do(context.Background(), func(ctx context.Context) error {
				_, err := j.pool.Exec(ctx, j.sql.giveBack, j.batch, ids, j.holder)
				return err
			})
			if err != nil {
				j.closeErr = j.fail("Close", err)
			}
		}
		j.mu.Lock()
		clear(j.held)
		j.mu.Unlock()
		j.pool.Close()
	})
	return j.closeErr
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

func (j *Journal) isClosed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed
}

// fail wraps an error of the database in one line naming the batch and
// the method. (pgx puts each address it failed to connect to on a line of
// its own.)
func (j *Journal) fail(method string, err error) error {
	err = fmt.Errorf("reboundpg: %s of batch %q: %w", method, j.batch, err)
	if msg := err.Error(); strings.Contains(msg, "\n") {
		msg = strings.Join(strings.Fields(strings.ReplaceAll(msg, "\n", "; ")), " ")
		err = &lineError{msg: msg, err: err}
	}
	return j.redact(err)
}

// lineError is an error whose message is made one line.
type lineError struct {
	msg string
	err error
}

func (e *lineError) Error() string { return e.msg }
func (e *lineError) Unwrap() error { return e.err }

// redactor returns a function that removes the passwords in url, and the
// ones given, from an error's message. pgx leaves passwords out of its
// errors; this makes sure, whatever the error's source.
func redactor(url string, more ...string) func(error) error {
	secrets := slices.Clone(more)
	secrets = append(secrets, urlPasswords(url)...)
	secrets = slices.DeleteFunc(secrets, func(s string) bool { return s == "" })
	return func(err error) error {
		if err == nil {
			return nil
		}
		msg := err.Error()
		leaked := false
		for _, s := range secrets {
			if strings.Contains(msg, s) {
				msg, leaked = strings.ReplaceAll(msg, s, "xxxxx"), true
			}
		}
		if !leaked {
			return err
		}
		return &redactedError{msg: msg, kind: kindOf(err)}
	}
}

var dsnPassword = regexp.MustCompile(`(?i)password\s*=\s*('(?:[^'\\]|\\.)*'|\S+)`)

// urlPasswords finds the passwords a connection string may hold, in the
// forms it may hold them (raw and decoded).
func urlPasswords(s string) []string {
	var out []string
	if u, err := url.Parse(s); err == nil {
		if pw, ok := u.User.Password(); ok {
			out = append(out, pw, url.QueryEscape(pw), url.PathEscape(pw))
		}
		if pw := u.Query().Get("password"); pw != "" {
			out = append(out, pw, url.QueryEscape(pw))
		}
	}
	if _, rest, ok := strings.Cut(s, "://"); ok {
		// A URL that does not parse still carries user:password@ before the host.
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
				out = append(out, pw)
				if dec, err := url.PathUnescape(pw); err == nil {
					out = append(out, dec)
				}
			}
		}
	}
	for _, m := range dsnPassword.FindAllStringSubmatch(s, -1) {
		out = append(out, strings.Trim(m[1], "'"))
	}
	return out
}

// redactedError is an error whose message held a password: it keeps the
// message without it, and only the sentinel errors of its chain.
type redactedError struct {
	msg  string
	kind error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.kind }

// kindOf returns the sentinel error err wraps that callers test for, if
// any: a redacted error keeps them and drops the rest of its chain, which
// may hold the password.
func kindOf(err error) error {
	for _, k := range []error{batch.ErrDifferentInput, ErrClosed, ErrUnreachable, context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, k) {
			return k
		}
	}
	return nil
}

func defaultWorker() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "host"
	}
	var b [3]byte
	rand.Read(b[:])
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

func randomInt63() int64 {
	var b [8]byte
	rand.Read(b[:])
	return int64(binary.LittleEndian.Uint64(b[:]) >> 1)
}
