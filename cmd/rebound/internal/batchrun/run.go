package batchrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/rebound-go/rebound/batch"
	reboundbolt "github.com/rebound-go/rebound/bolt"
	reboundpg "github.com/rebound-go/rebound/postgres"
	"github.com/rebound-go/rebound/ratelimit"
	reboundredis "github.com/rebound-go/rebound/redis"
)

// Result is what a run did: its report, and what the command still says
// after printing it (see Finish).
type Result struct {
	Report  Report
	written batch.Written
	stopped bool // the run stopped before its end
}

// Run runs c (checked: see Config.Check) as "rebound batch" does,
// telling its progress and anything gone wrong on stderr, each line
// starting "rebound batch: ". It returns nil and 1 if the run failed
// before it could write its output; else the result, whose report the
// command prints before it calls Finish.
func Run(ctx context.Context, c *Config, stderr io.Writer) (*Result, int) {
	s := &session{c: c, stderr: stderr}
	defer s.close()
	if err := s.prepare(ctx); err != nil {
		return nil, s.fail("%s", reason(err))
	}
	summary, runErr := s.run(ctx)
	// Answers paid for and not in the journal are kept before anything
	// else can fail.
	if err := keepUnrecorded(s.kept, s.file.Input().Digest, summary.Unrecorded, s.unrecorded != nil); err != nil {
		return nil, s.fail("%s", reason(err))
	}
	switch {
	case len(summary.Unrecorded) > 0:
		fmt.Fprintf(stderr, "rebound batch: %d answers could not be recorded in the journal; they are kept in %s, and the next run records them\n", len(summary.Unrecorded), s.kept)
	case len(s.unrecorded) > 0:
		fmt.Fprintf(stderr, "rebound batch: recorded the %d answers kept in %s by an earlier run\n", len(s.unrecorded), s.kept)
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) && !errors.Is(runErr, context.DeadlineExceeded) {
		if summary.Sent == 0 {
			return nil, s.fail("%s", reason(runErr))
		}
		fmt.Fprintf(stderr, "rebound batch: %s\n", reason(runErr))
	}
	res, err := s.result(ctx, summary)
	if err != nil {
		return nil, s.fail("%s", reason(err))
	}
	res.stopped = runErr != nil
	return res, 0
}

// Finish says on stderr why the run is not a success, if it is not, and
// returns the command's exit code: 0 when every request of the batch has
// succeeded, else 1.
func (res *Result) Finish(stderr io.Writer) int {
	switch r := res.Report; {
	case res.stopped:
		fmt.Fprintln(stderr, "rebound batch: stopped before the end; run the same command again to go on")
		return 1
	case r.Journaled.Succeeded != r.Journaled.Total:
		return 1
	case r.Malformed > 0:
		fmt.Fprintf(stderr, "rebound batch: %d malformed lines of %s were not sent\n", r.Malformed, r.Input)
		return 1
	}
	return 0
}

// reason is err as the command says it, after "rebound batch: ": without
// the "batch: " that the batch package starts its errors with, where one
// of them ends err (itself, or wrapped after the name of a file).
func reason(err error) string {
	msg := err.Error()
	for e := err; e != nil; e = errors.Unwrap(e) {
		if inner := e.Error(); strings.HasPrefix(inner, "batch: ") && strings.HasSuffix(msg, inner) {
			return msg[:len(msg)-len(inner)] + strings.TrimPrefix(inner, "batch: ")
		}
	}
	return msg
}

// session is one run's state.
type session struct {
	c      *Config
	stderr io.Writer

	file       *batch.File
	kept       string          // the file of answers kept unrecorded
	unrecorded []batch.Outcome // the answers an earlier run kept, nil if none
	runner     *batch.Runner
	waits      *waits // what the runner's requests wait for
	journal    batch.Journal
	closers    []func() error
}

// fail says what stopped the run on stderr and returns the exit code.
func (s *session) fail(format string, a ...any) int {
	fmt.Fprintf(s.stderr, "rebound batch: "+format+"\n", a...)
	return 1
}

// close closes what the run opened, the last first.
func (s *session) close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// prepare reads the input and the answers kept by an earlier run, and
// opens the journal and the limits: everything that can fail before a
// request is sent.
func (s *session) prepare(ctx context.Context) error {
	c := s.c
	// The output is written at the end: a place it cannot go is found
	// before anything is sent.
	for _, out := range []string{c.Out, c.Errors} {
		if err := writable(out); err != nil {
			return err
		}
	}
	var err error
	if s.file, err = readBatchInput(c.Input, s.stderr); err != nil {
		return err
	}
	if len(s.file.Malformed) > 0 && c.Strict {
		return fmt.Errorf("%d malformed lines in %s; nothing sent (--strict)", len(s.file.Malformed), c.Input)
	}
	s.kept = KeptPath(c.Out)
	if s.unrecorded, err = readKept(s.kept, s.file.Input().Digest); err != nil {
		return err
	}
	if s.runner, err = s.newRunner(ctx); err != nil {
		return err
	}
	j, err := OpenJournal(ctx, c.Journal, reboundpg.Config{Batch: c.BatchName, Schema: c.Schema, Lease: c.Lease}, false)
	if errors.Is(err, reboundbolt.ErrCorrupt) {
		// What it recorded is lost but for the output files of the runs
		// before; a new journal sends everything again.
		return fmt.Errorf("%v; move it aside to start the batch afresh", err)
	}
	if err != nil {
		return err
	}
	s.journal = j
	s.closers = append(s.closers, j.Close)
	return nil
}

// newRunner makes the run's batch.Runner: the key, the policy, the limits.
func (s *session) newRunner(ctx context.Context) (*batch.Runner, error) {
	c := s.c
	r := &batch.Runner{
		BaseURL:     c.BaseURL,
		Concurrency: c.Concurrency,
		Policy:      c.policy,
		Options:     batch.Options{RetryFailed: c.RetryFailed},
		Unrecorded:  s.unrecorded,
	}
	if c.key != "" {
		r.Header = c.dialect.header(c.key)
	}
	limiter, err := s.limiter(ctx)
	if err != nil {
		return nil, err
	}
	// The runner's own defaults, made here so that the progress can say
	// what the requests wait for.
	if limiter == nil {
		limiter = ratelimit.New(ratelimit.Config{})
	}
	s.waits = &waits{concurrency: c.Concurrency,
		adaptive: ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: c.Concurrency, Max: c.Concurrency})}
	r.Limiter, r.Adaptive, r.Policy.Observer = pacer{limiter, s.waits}, s.waits.adaptive, s.waits
	return r, nil
}

// limiter returns the pace of the run's requests: one of its own, or one
// shared on Redis; nil for none but the provider's, learnt from its
// headers.
func (s *session) limiter(ctx context.Context) (ratelimit.Pacer, error) {
	c := s.c
	limits := ratelimit.Config{RequestsPerMinute: c.RPM}
	switch {
	case c.Redis != "":
	case c.RPM > 0:
		return ratelimit.New(limits), nil
	default:
		return nil, nil
	}
	cfg, err := reboundredis.Open(c.Redis)
	if err != nil {
		return nil, fmt.Errorf("--redis: %v", err)
	}
	// A batch waits on the network anyway: a decision may take a few
	// round trips' worth before it is made alone.
	cfg.Timeout = 50 * time.Millisecond
	cfg.OnChange = func(up bool, err error) {
		if !up {
			fmt.Fprintf(s.stderr, "rebound batch: redis is away (%v); pacing alone until it is back\n", err)
		} else {
			fmt.Fprintln(s.stderr, "rebound batch: redis is back")
		}
	}
	s.closers = append(s.closers, cfg.Client.Close)
	store, err := reboundredis.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--redis: %v", err)
	}
	// A first connection takes longer than a decision may wait, and the
	// workers' first decisions come all at once: the pool's connections,
	// made now, are not taken for Redis being away.
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := store.Warm(wctx); err != nil {
		fmt.Fprintf(s.stderr, "rebound batch: --redis: %v; pacing alone until it answers\n", err)
	}
	cancel()
	u, _ := url.Parse(c.BaseURL)
	return reboundredis.NewLimiter(store, u.Host, limits), nil
}

// run sends the batch, its progress shown on stderr, said to go without
// a key if it does (a run that stops before it sends says only why).
func (s *session) run(ctx context.Context) (batch.Summary, error) {
	if s.c.key == "" {
		u, _ := url.Parse(s.c.BaseURL)
		fmt.Fprintf(s.stderr, "rebound batch: %s is not set; the requests go to %s without a key\n", s.c.keyEnv, u.Host)
	}
	prog := newProgressPrinter(s.stderr, s.c.Terminal, s.waits)
	s.runner.Progress = prog.set
	stopProgress := prog.start()
	defer stopProgress()
	return s.runner.Run(ctx, s.file, journal{s.journal, s.waits})
}

// result writes the output and errors files afresh from the journal,
// whatever stopped the run, and makes the run's report.
func (s *session) result(ctx context.Context, summary batch.Summary) (*Result, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	c := s.c
	written, err := writeBatchOutput(wctx, s.journal, c.Out, c.Errors)
	if err != nil {
		return nil, err
	}
	counts, err := s.journal.Counts(wctx)
	if err != nil {
		return nil, fmt.Errorf("reading the journal: %v", err)
	}
	return &Result{written: written, Report: Report{
		Input: c.Input, Output: c.Out, Errors: c.Errors, Journal: shownJournal(c.Journal),
		Malformed: len(s.file.Malformed), Journaled: counts,
		Run: RunReport{
			Todo: summary.Todo, Sent: summary.Sent, Resent: summary.Resent,
			Succeeded: summary.Succeeded, Failed: summary.Failed, FailedPermanent: summary.FailedPermanent,
			Attempts: summary.Attempts, Retries: summary.Retries, Interrupted: summary.Interrupted, Unrecorded: len(summary.Unrecorded),
			Seconds: summary.Elapsed.Seconds(), PerSecond: perSecond(summary.Finished(), summary.Elapsed),
		},
	}}, nil
}

// Report is the JSON object "rebound batch --json" prints.
type Report struct {
	Input     string       `json:"input"`
	Output    string       `json:"output"`
	Errors    string       `json:"errors"`
	Journal   string       `json:"journal"`
	Malformed int          `json:"malformed_lines"`
	Run       RunReport    `json:"run"`
	Journaled batch.Counts `json:"journal_counts"`
}

// RunReport is what one run did.
type RunReport struct {
	Todo            int     `json:"todo"`
	Sent            int     `json:"sent"`
	Resent          int     `json:"resent_after_interruption"`
	Succeeded       int     `json:"succeeded"`
	Failed          int     `json:"failed"`
	FailedPermanent int     `json:"failed_permanent"`
	Attempts        int     `json:"attempts"`
	Retries         int     `json:"retries"`
	Interrupted     bool    `json:"interrupted"`
	Unrecorded      int     `json:"unrecorded"`
	Seconds         float64 `json:"seconds"`
	PerSecond       float64 `json:"requests_per_second"`
}

// perSecond is n a second over d; zero for no time.
func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// WriteTable writes the report as a few lines.
func (res *Result) WriteTable(w io.Writer) {
	r, written := res.Report, res.written
	run := r.Run
	fmt.Fprintf(w, "this run: %d sent (%d resent after an interruption), %d succeeded, %d failed, %d failed permanently; %d requests, %d retries, %.1f s, %.0f/s\n",
		run.Sent, run.Resent, run.Succeeded, run.Failed, run.FailedPermanent, run.Attempts, run.Retries, run.Seconds, run.PerSecond)
	c := r.Journaled
	fmt.Fprintf(w, "the batch: %d requests: %d succeeded, %d failed, %d failed permanently, %d not yet answered\n",
		c.Total, c.Succeeded, c.Failed, c.FailedPermanent, c.Pending+c.InFlight)
	fmt.Fprintf(w, "wrote %d lines to %s and %d to %s\n", written.Succeeded, r.Output, written.Failed, r.Errors)
	if c.Failed > 0 || c.Pending+c.InFlight > 0 {
		fmt.Fprintln(w, "run the same command again to send what failed or was not answered")
	}
	if c.FailedPermanent > 0 {
		fmt.Fprintf(w, "%d failed permanently; run the same command with --retry-failed to send them again\n", c.FailedPermanent)
	}
}
