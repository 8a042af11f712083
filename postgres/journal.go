package reboundpg

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
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

func (j *Journal) isClosed() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.closed
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
