package reboundpg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// retryJournal returns a Journal with a lease and a pool that connects
// nowhere, enough for its retries (Journal.do), in virtual time.
func retryJournal(t *testing.T, lease time.Duration) *Journal {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &Journal{pool: pool, lease: lease, held: map[string]time.Time{}}
}

var errKilled = &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}

// tries is an op for Journal.do that fails with failures in turn, then
// succeeds, and notes when it was called.
type tries struct {
	failures []error
	at       []time.Time
}

// failing returns err more times than any test tries.
func failing(err error) []error {
	errs := make([]error, 1000)
	for i := range errs {
		errs[i] = err
	}
	return errs
}

func (tr *tries) op(context.Context) error {
	tr.at = append(tr.at, time.Now())
	if n := len(tr.at); n <= len(tr.failures) {
		return tr.failures[n-1]
	}
	return nil
}

// TestAWriteOnAKilledConnectionGoesThrough: a statement whose connection
// was killed is tried again at once, and its success is the result.
func TestAWriteOnAKilledConnectionGoesThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := retryJournal(t, DefaultLease)
		tr := &tries{failures: []error{fmt.Errorf("writing: %w", errKilled), io.ErrUnexpectedEOF}}
		start := time.Now()
		if err := j.do(t.Context(), tr.op); err != nil {
			t.Fatalf("do: %v", err)
		}
		if len(tr.at) != 3 || tr.at[1] != start {
			t.Errorf("%d tries, the second after %v; want 3, the second at once", len(tr.at), tr.at[1].Sub(start))
		}
	})
}

// TestWritesAreTriedUntilTheLeaseRunsOut: while the database stays away,
// a statement is tried again, less and less often, until the leases of
// the claims held run out, a lease after they were last set; then it
// fails with ErrUnreachable.
func TestWritesAreTriedUntilTheLeaseRunsOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 30 * time.Second
		j := retryJournal(t, lease)
		set := time.Now()
		j.held["a"], j.held["b"] = set, set.Add(lease/3)
		time.Sleep(lease / 4) // the database goes away a while after the claims
		tr := &tries{failures: failing(&netError{syscall.ECONNREFUSED})}
		err := j.do(t.Context(), tr.op)
		if !errors.Is(err, ErrUnreachable) || !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("do: %v; want ErrUnreachable with the last failure", err)
		}
		last := tr.at[len(tr.at)-1]
		if last != set.Add(lease) {
			t.Errorf("the last try came %v after the first lease was set; want at the lease's end, %v", last.Sub(set), lease)
		}
		for i := 2; i < len(tr.at); i++ {
			if gap := tr.at[i].Sub(tr.at[i-1]); gap > maxBackoff || (gap == 0 && i < len(tr.at)-1) {
				t.Errorf("try %d came %v after the one before; want a wait, at most %v", i+1, gap, maxBackoff)
			}
		}
		t.Logf("%d tries in %v", len(tr.at), last.Sub(tr.at[0]))
		if len(tr.at) < 10 || len(tr.at) > 40 {
			t.Errorf("%d tries in %v; want backoff, neither a tight loop nor a few", len(tr.at), lease)
		}
	})
}

// TestAWritePastTheLeaseIsTriedOnceMore: once the leases have run out, a
// statement that fails on its connection is tried once more, on a fresh
// connection, and no longer. The journal is then away: the statements
// after are tried once, until one succeeds.
func TestAWritePastTheLeaseIsTriedOnceMore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := retryJournal(t, time.Second)
		j.held["a"] = time.Now()
		time.Sleep(time.Minute)
		tr := &tries{failures: failing(io.EOF)}
		if err := j.do(t.Context(), tr.op); !errors.Is(err, ErrUnreachable) || len(tr.at) != 2 {
			t.Errorf("do: %v after %d tries; want ErrUnreachable after 2", err, len(tr.at))
		}
		tr = &tries{failures: failing(io.EOF)}
		if err := j.do(t.Context(), tr.op); !errors.Is(err, ErrUnreachable) || len(tr.at) != 1 {
			t.Errorf("do while away: %v after %d tries; want ErrUnreachable after 1", err, len(tr.at))
		}
		tr = &tries{}
		if err := j.do(t.Context(), tr.op); err != nil || len(tr.at) != 1 {
			t.Errorf("do as the database comes back: %v after %d tries; want success", err, len(tr.at))
		}
		tr = &tries{failures: []error{io.EOF}}
		if err := j.do(t.Context(), tr.op); err != nil || len(tr.at) != 2 {
			t.Errorf("do once back: %v after %d tries; want the second to succeed", err, len(tr.at))
		}
	})
}

// TestRetriesAreBoundedByAThirdOfTheLease: a first try may take the write
// timeout; a retry, a third of the lease, so that a database that never
// answers is tried more than once in a lease.
func TestRetriesAreBoundedByAThirdOfTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 30 * time.Second
		j := retryJournal(t, lease)
		var bounds []time.Duration
		op := func(ctx context.Context) error {
			deadline, _ := ctx.Deadline()
			bounds = append(bounds, time.Until(deadline))
			<-ctx.Done() // no answer
			return ctx.Err()
		}
		if err := j.do(t.Context(), op); !errors.Is(err, ErrUnreachable) {
			t.Errorf("do: %v; want ErrUnreachable", err)
		}
		if len(bounds) < 3 || bounds[0] != writeTimeout || bounds[1] != lease/3 {
			t.Errorf("the tries were bounded by %v; want %v, then %v", bounds, writeTimeout, lease/3)
		}
	})
}

// TestWritesHoldingNothingAreTriedForALease: a journal that holds no
// claim tries a statement for a lease after its first failure.
func TestWritesHoldingNothingAreTriedForALease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := retryJournal(t, 10*time.Second)
		tr := &tries{failures: failing(io.EOF)}
		start := time.Now()
		if err := j.do(t.Context(), tr.op); !errors.Is(err, ErrUnreachable) || time.Since(start) != 10*time.Second {
			t.Errorf("do: %v after %v; want ErrUnreachable after the lease", err, time.Since(start))
		}
	})
}

// TestStatementErrorsAreNotTriedAgain: an error of the statement, not of
// its connection, is returned at once; so is any error once the caller's
// context is done.
func TestStatementErrorsAreNotTriedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := retryJournal(t, DefaultLease)
		dup := &pgconn.PgError{Code: "23505", Message: "duplicate key"}
		tr := &tries{failures: []error{dup}}
		if err := j.do(t.Context(), tr.op); !errors.Is(err, dup) || len(tr.at) != 1 {
			t.Errorf("do: %v after %d tries; want the statement's error after 1", err, len(tr.at))
		}
		ctx, cancel := context.WithCancel(t.Context())
		tr = &tries{failures: failing(io.EOF)}
		go func() {
			time.Sleep(time.Second)
			cancel()
		}()
		if err := j.do(ctx, tr.op); !errors.Is(err, io.EOF) || time.Since(tr.at[0]) != time.Second {
			t.Errorf("do: %v, %v after the first try; want the last failure as the context ends", err, time.Since(tr.at[0]))
		}
	})
}

// netError is a network error, as the net package's.
type netError struct{ err error }

func (e *netError) Error() string   { return "dial tcp 127.0.0.1:5432: " + e.err.Error() }
func (e *netError) Unwrap() error   { return e.err }
func (e *netError) Timeout() bool   { return false }
func (e *netError) Temporary() bool { return false }

func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{errKilled, true},
		{fmt.Errorf("reading: %w", &pgconn.PgError{Code: "08006"}), true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{&pgconn.PgError{Code: "53300", Message: "too many connections"}, true},
		{io.EOF, true},
		{io.ErrUnexpectedEOF, true},
		{syscall.ECONNRESET, true},
		{&netError{syscall.ECONNREFUSED}, true},
		{context.DeadlineExceeded, true},
		{&pgconn.PgError{Code: "23505"}, false},
		{&pgconn.PgError{Code: "42P01", Message: "relation does not exist"}, false},
		{&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}, false},
		{errors.New("cannot encode"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
