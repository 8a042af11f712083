package batch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/ratelimit"
)

// MaxResponse is the largest response body a run keeps, in bytes; a
// larger one fails its request permanently.
const MaxResponse = 64 << 20

// DefaultConcurrency is how many requests a Runner keeps in flight when
// its Concurrency is zero.
const DefaultConcurrency = 16

// DefaultAttemptTimeout bounds each attempt of a run whose Policy sets no
// AttemptTimeout: long enough for a model that thinks for minutes, short
// enough that a server that never answers cannot hold a run for ever.
const DefaultAttemptTimeout = 10 * time.Minute

// Runner sends a batch's requests through rebound.Transport and records
// each outcome in a journal as it comes. The zero Runner needs only a
// BaseURL.
//
// Its requests are ratelimit.Batch calls (ratelimit.WithPriority): under
// an Adaptive limit shared with interactive calls to the same provider
// (Runner.Adaptive, or one in Base), they take the slots the interactive
// calls leave, and at least one in MaxPassOver+1 of those that free while
// both wait, so the batch yields to people and still ends.
type Runner struct {
	// BaseURL is where the requests go: a line's url is appended to its
	// path, once: a BaseURL ending in /v1 and a url starting with /v1/
	// make one /v1. Required.
	BaseURL string

	// Header is added to every request: the provider's key and version
	// headers.
	Header http.Header

	// Concurrency bounds the requests in flight, and so how many a run
	// that is killed may leave unrecorded. Zero means DefaultConcurrency.
	Concurrency int

	// Policy retries each request, as rebound.Transport's Policy. Its
	// Observer, if any, hears every event. The zero Policy is the
	// recommended one, with an AttemptTimeout of DefaultAttemptTimeout.
	Policy rebound.Policy

	// Adaptive bounds the requests in flight together with the other
	// calls to the provider that share it, the run's requests waiting as
	// ratelimit.Batch. Nil means a limit of the run's own, of
	// Concurrency.
	Adaptive *ratelimit.Adaptive

	// Limiter paces the requests and learns the provider's limits from
	// its rate-limit headers. Nil means a ratelimit.Limiter with no limits
	// of its own, which paces by the headers alone.
	Limiter ratelimit.Pacer

	// Base sends each attempt. Nil means a clone of http.DefaultTransport
	// that keeps Concurrency idle connections to the host.
	Base http.RoundTripper

	// Options are the run's choices that the journal applies.
	Options Options

	// Progress, if set, is called once the run knows what it has to do,
	// and then after every outcome is recorded, one call at a time. It
	// must return quickly.
	Progress func(Progress)

	// Poll is how often a run that has nothing to claim, while other runs
	// sharing its journal hold items, asks again: they may die and leave
	// their items to it. Zero means one second.
	Poll time.Duration

	// Unrecorded are answers that an earlier run received and could not
	// record (its Summary.Unrecorded): Run records them after Prepare,
	// before it claims anything, so that they are not sent and paid for
	// again. The default (nil) has none.
	Unrecorded []Outcome
}

// Progress is a run's progress, as Runner.Progress hears it.
type Progress struct {
	// Todo is how many items the run found to send when it began.
	Todo int
	// Succeeded, Failed and FailedPermanent count the run's outcomes so
	// far.
	Succeeded, Failed, FailedPermanent int
	// InFlight is how many requests are being sent, Retrying how many of
	// them wait to be tried again.
	InFlight, Retrying int
	// Elapsed is the time since the run began.
	Elapsed time.Duration
}

// Finished is how many of the run's items have an outcome.
func (p Progress) Finished() int { return p.Succeeded + p.Failed + p.FailedPermanent }

// Summary is what a run did.
type Summary struct {
	Progress
	// Sent is how many items the run sent, Resent how many of those an
	// earlier run had sent and never recorded (it stopped with them in
	// flight): those may have been answered before, and paid for twice.
	Sent, Resent int
	// Attempts is how many HTTP requests the run made, retries included;
	// Retries how many retries its policy scheduled.
	Attempts, Retries int
	// Interrupted reports that the run stopped before its end, with the
	// items in flight given back unanswered.
	Interrupted bool
	// Unrecorded are the outcomes that the run received, or was given
	// (Runner.Unrecorded), and that are not in the journal: it failed to
	// record them, and the run stopped. They are answers paid for: keep
	// them, and give them to the next run's Runner.Unrecorded.
	Unrecorded []Outcome
}

// Run sends the requests of f that j has not seen succeed, records each
// outcome in j, and returns what it did. It stops early, giving back the
// items in flight, when ctx is done; the error is then ctx's, with the
// summary of what was done.
//
// An error of the journal stops the run too: it claims nothing more, and
// the requests in flight end as they would. An answer that the journal
// fails to record is kept, and recorded once more when the run ends; what
// still fails is in Summary.Unrecorded, for the caller to keep.
func (r *Runner) Run(ctx context.Context, f *File, j Journal) (Summary, error) {
	start := time.Now()
	kept := Summary{Unrecorded: r.Unrecorded}
	if r.BaseURL == "" {
		return kept, errors.New("batch: Runner.BaseURL is empty")
	}
	if err := checkUnrecorded(f, r.Unrecorded); err != nil {
		return kept, err
	}
	if err := j.Prepare(ctx, f.Input(), r.Options); err != nil {
		return kept, err
	}
	if len(r.Unrecorded) > 0 {
		if err := j.Record(context.WithoutCancel(ctx), r.Unrecorded); err != nil {
			return kept, fmt.Errorf("batch: recording the answers an earlier run could not: %w", err)
		}
	}
	counts, err := j.Counts(ctx)
	if err != nil {
		return Summary{}, err
	}
	s := &state{
		runner:   r,
		journal:  j,
		requests: make(map[string]*Request, len(f.Requests)),
		progress: Progress{Todo: counts.Pending + counts.Failed + counts.InFlight},
		start:    start,
	}
	if r.Options.RetryFailed {
		s.progress.Todo += counts.FailedPermanent
	}
	for i := range f.Requests {
		s.requests[f.Requests[i].CustomID] = &f.Requests[i]
	}
	var closeIdle func()
	s.client, closeIdle = r.client(s)
	defer closeIdle()
	if r.Progress != nil {
		s.reportProgress(s.progress)
	}
	err = s.dispatch(ctx)
	s.recordKept(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.summary.Progress = s.progress
	s.summary.Progress.Elapsed = time.Since(start)
	s.summary.Attempts = int(s.attempts.Load())
	s.summary.Retries = int(s.retries.Load())
	return s.summary, err
}

// state is one run's.
type state struct {
	runner   *Runner
	journal  Journal
	requests map[string]*Request
	client   *http.Client
	start    time.Time

	attempts, retries, retrying atomic.Int64

	mu       sync.Mutex // guards progress and summary
	progress Progress
	summary  Summary
}

func (r *Runner) concurrency() int {
	if r.Concurrency > 0 {
		return r.Concurrency
	}
	return DefaultConcurrency
}

// dispatch claims items and hands them to Concurrency senders, never more
// claimed and unrecorded than that, until the journal has nothing more or
// ctx is done.
func (s *state) dispatch(ctx context.Context) error {
	n := s.runner.concurrency()
	work := make(chan Claim, n)
	done := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for c := range work {
				done <- s.handle(ctx, c)
			}
		})
	}
	defer func() {
		close(work)
		wg.Wait()
	}()

	free := n // slots neither claimed nor sending
	refill := max(1, n/4)
	poll := s.runner.Poll
	if poll <= 0 {
		poll = time.Second
	}
	var (
		exhausted bool
		wait      <-chan time.Time
		firstErr  error
	)
	for {
		if firstErr == nil && ctx.Err() == nil && !exhausted && free > 0 && (free >= refill || free == n) {
			claims, err := s.journal.Claim(ctx, free)
			switch {
			case err != nil:
				firstErr = fmt.Errorf("batch: claiming work: %w", err)
			case len(claims) == 0:
				exhausted = true
			default:
				s.claimed(claims)
				free -= len(claims)
				for _, c := range claims {
					work <- c
				}
			}
		}
		if free == n { // nothing of ours in flight
			if firstErr != nil {
				return firstErr
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if exhausted {
				c, err := s.journal.Counts(ctx)
				if err != nil {
					return fmt.Errorf("batch: reading the journal: %w", err)
				}
				if c.InFlight == 0 && c.Pending == 0 {
					return nil
				}
				// Other runs hold items, or are taking them (a shared
				// journal skips the rows another run's claim has locked,
				// which still read as Pending): wait, in case they die.
				wait = time.After(poll)
			}
		}
		select {
		case err := <-done:
			free++
			if err != nil && firstErr == nil {
				firstErr = err
			}
		case <-wait:
			wait, exhausted = nil, false
		case <-ctx.Done():
			if free == n {
				return ctx.Err()
			}
			// The senders see it too, and give their items back.
			err := <-done
			free++
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}
	}
}

// checkUnrecorded checks answers kept by an earlier run: each of an item
// of f, and an outcome.
func checkUnrecorded(f *File, kept []Outcome) error {
	if len(kept) == 0 {
		return nil
	}
	ids := make(map[string]bool, len(f.Requests))
	for _, r := range f.Requests {
		ids[r.CustomID] = true
	}
	for _, o := range kept {
		switch {
		case !ids[o.ID]:
			return fmt.Errorf("batch: an unrecorded answer of custom_id %q, which the input does not have", o.ID)
		case o.State < Succeeded || o.State > FailedPermanent:
			return fmt.Errorf("batch: an unrecorded answer of %q in state %v", o.ID, o.State)
		}
	}
	return nil
}

// recordKept tries once more to record the answers that the journal
// failed to record during the run (the database may be back), and leaves
// in the summary those it still cannot.
func (s *state) recordKept(ctx context.Context) {
	s.mu.Lock()
	kept := s.summary.Unrecorded
	s.mu.Unlock()
	if len(kept) == 0 {
		return
	}
	if err := s.journal.Record(context.WithoutCancel(ctx), kept); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.summary.Unrecorded = nil
	for _, o := range kept {
		s.counted(o)
	}
}

// counted counts a recorded outcome in the run's progress.
func (s *state) counted(o Outcome) {
	switch o.State {
	case Succeeded:
		s.progress.Succeeded++
	case Failed:
		s.progress.Failed++
	case FailedPermanent:
		s.progress.FailedPermanent++
	case Pending:
		s.summary.Interrupted = true
	}
}

// claimed notes claims handed to the run.
func (s *state) claimed(claims []Claim) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.progress.InFlight += len(claims)
}

// handle sends one claimed item and records its outcome.
func (s *state) handle(ctx context.Context, c Claim) error {
	o := s.send(ctx, c)
	// The outcome is recorded even when ctx is done: what came is kept,
	// and an item never sent is given back. One that was sent and not
	// answered is left to the journal's Close, which hands it out again
	// as resent: the server may have done its work. The journal bounds
	// its own writes (a database away is tried for as long as the lease
	// allows).
	var err error
	if o.State != Pending || o.Attempts == 0 {
		err = s.journal.Record(context.WithoutCancel(ctx), []Outcome{o})
	}
	s.mu.Lock()
	s.progress.InFlight--
	if o.State != Pending || o.Attempts > 0 { // sent, or judged: not given back unsent
		s.summary.Sent++
		if c.Resent {
			s.summary.Resent++
		}
	}
	switch {
	case err == nil:
		s.counted(o)
	case o.State != Pending:
		// An answer: kept, for the journal or the caller. (A give-back
		// that fails leaves the claim to Close, or to the lease.)
		s.summary.Unrecorded = append(s.summary.Unrecorded, o)
	}
	p := s.progress
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("batch: recording %q: %w", c.ID, err)
	}
	if s.runner.Progress != nil && o.State != Pending {
		p.Retrying = int(max(0, s.retrying.Load()))
		p.Elapsed = time.Since(s.start)
		s.reportProgress(p)
	}
	return nil
}

// reportProgress calls Runner.Progress, one call at a time.
func (s *state) reportProgress(p Progress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runner.Progress(p)
}
