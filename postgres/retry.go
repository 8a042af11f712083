package reboundpg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrUnreachable is the error of a journal's method when PostgreSQL did
// not answer, on fresh connections, for as long as the lease allowed: the
// claims this worker held may be other workers' by now.
var ErrUnreachable = errors.New("PostgreSQL did not answer within the lease")

// Backoff between the tries of a statement whose connection failed: the
// first retry goes at once, on a fresh connection; then the wait doubles
// from firstBackoff up to maxBackoff, less a random part of it.
const (
	firstBackoff = 50 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

// do runs op, a statement or a transaction that may be run again (it
// leaves the rows as it found them, or as one run of it leaves them), and
// runs it again while it fails on its connection (transient): after the
// first failure, on fresh connections, with backoff, until the leases of
// the claims this journal holds run out (retryUntil), and once at least.
// It returns op's last error, wrapped in ErrUnreachable when it gave up on
// the database. The journal is then away: until a statement succeeds,
// each is tried once, as a database that stays away costs each statement
// its tries, and a stopping run has several to make.
//
// A first try is bounded by writeTimeout; a retry, and a try while away,
// by a third of the lease (at least a second), so that a database that
// takes connections and never answers (a network that drops everything)
// is tried a few times in a lease.
func (j *Journal) do(ctx context.Context, op func(context.Context) error) error {
	away := j.isAway()
	var first, until time.Time
	for try := 0; ; try++ {
		timeout := writeTimeout
		if try > 0 || away {
			timeout = min(writeTimeout, max(j.lease/3, time.Second))
		}
		tctx, cancel := context.WithTimeout(ctx, timeout)
		err := op(tctx)
		cancel()
		if err == nil {
			j.setAway(false)
			return nil
		}
		if ctx.Err() != nil || !transient(err) {
			return err
		}
		now := time.Now()
		switch {
		case away:
			return fmt.Errorf("%w, nor since: %w", ErrUnreachable, err)
		case try == 0:
			first, until = now, j.retryUntil(now)
			// The other connections went the way of this one, most
			// likely (a restart, a failover, the network): they are
			// closed as they come back to the pool, and dialled anew.
			j.pool.Reset()
		case !now.Before(until):
			j.setAway(true)
			return fmt.Errorf("%w (%v, in %d tries): %w", ErrUnreachable, now.Sub(first).Round(time.Millisecond), try+1, err)
		}
		wait := time.Duration(0)
		if try > 0 {
			wait = min(maxBackoff, firstBackoff<<min(try-1, 10))
			wait -= rand.N(wait / 2)
			wait = min(wait, until.Sub(now))
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

func (j *Journal) isAway() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.away
}

func (j *Journal) setAway(away bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.away = away
}

// retryUntil returns when the tries of a statement that first failed at
// failed end: when the first lease of this journal's claims runs out, a
// lease after it was last set; holding none, a lease after the failure.
func (j *Journal) retryUntil(failed time.Time) time.Time {
	j.mu.Lock()
	defer j.mu.Unlock()
	first := failed
	for _, at := range j.held {
		if at.Before(first) {
			first = at
		}
	}
	return first.Add(j.lease)
}

// transient reports whether err is the connection's rather than the
// statement's: the server went away or is restarting, the connection
// broke or could not be made, or the server did not answer in time. The
// statement may succeed on another connection.
func transient(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// A connection exception (class 08), the server shutting down,
		// crashing or starting up (57P01-57P03), or out of connections
		// (53300). Any other error of the server's would come again.
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", "53300":
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08")
	}
	var netErr net.Error
	return errors.As(err, new(*pgconn.ConnectError)) || errors.As(err, &netErr) || pgconn.SafeToRetry(err) ||
		pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}
