package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/batch"
	reboundbolt "github.com/rebound-go/rebound/bolt"
	reboundpg "github.com/rebound-go/rebound/postgres"
	"github.com/rebound-go/rebound/ratelimit"
	reboundredis "github.com/rebound-go/rebound/redis"
)

const batchUsage = `usage: rebound batch INPUT.jsonl --out OUTPUT.jsonl [flags]
       rebound batch status --journal PATH [--json]

Send every request of INPUT, a file in the OpenAI Batch API's format (lines
of {"custom_id", "method", "url", "body"}), to --base-url, through rebound's
recommended retries, rate limiting and retry budget, and write one line for
each custom_id answered to OUTPUT and one for each that failed to the errors
file, in the Batch API's output format.

Every outcome is written to a journal as it comes. Run the same command
again and it sends only what failed in a way a later run may cure (a 5xx, a
429, an overload, an exhausted quota) or was never answered; a permanent
failure (a 400, a prompt too long) is sent again only with --retry-failed.
A run that is killed, even with SIGKILL, loses at most the requests in flight
(up to --concurrency), which the next run sends again and reports. Each run
writes OUTPUT and the errors file afresh from the journal. An answer the
journal cannot record (its database away for longer than the lease, its
file damaged) is kept in OUTPUT with .unrecorded.jsonl for .jsonl, and the
next run records it before it sends anything. A damaged journal file is
refused: move it aside to start the batch afresh.

The journal is a file (--journal PATH, by default OUTPUT.journal) that one
run uses at a time, or PostgreSQL (--journal postgres://...), which several
workers on several machines share: each runs the same command, and each
request is sent by one of them at a time, under a lease that a dead worker
loses.

The key is read from the environment: OPENAI_API_KEY, ANTHROPIC_API_KEY or
GEMINI_API_KEY by --dialect, or the variable --api-key-env names; none is
sent when it is unset. Malformed input lines are reported with their line
numbers and skipped (--strict: nothing is sent); a custom_id used twice, or a
journal made from another input, stops the run before anything is sent.

"rebound batch status" prints the journal's counts.

Exit 0 when every request has succeeded, 1 when some failed, were not sent
(malformed lines) or the run was stopped (run again to go on), 2 on bad
usage.

flags:
`

// dialect is how a provider takes its key, and where it is by default.
type dialect struct {
	baseURL, keyEnv string
	header          func(key string) http.Header
}

var dialects = map[string]dialect{
	"openai": {"https://api.openai.com", "OPENAI_API_KEY", func(key string) http.Header {
		return http.Header{"Authorization": {"Bearer " + key}}
	}},
	"anthropic": {"https://api.anthropic.com", "ANTHROPIC_API_KEY", func(key string) http.Header {
		return http.Header{"X-Api-Key": {key}, "Anthropic-Version": {"2023-06-01"}}
	}},
	"gemini": {"https://generativelanguage.googleapis.com", "GEMINI_API_KEY", func(key string) http.Header {
		return http.Header{"X-Goog-Api-Key": {key}}
	}},
}

// batchReport is the JSON object "rebound batch --json" prints.
type batchReport struct {
	Input     string       `json:"input"`
	Output    string       `json:"output"`
	Errors    string       `json:"errors"`
	Journal   string       `json:"journal"`
	Malformed int          `json:"malformed_lines"`
	Run       batchRun     `json:"run"`
	Journaled batch.Counts `json:"journal_counts"`
}

// batchRun is what one run did.
type batchRun struct {
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

// batchFlags are the flags of "rebound batch".
type batchFlags struct {
	out, errs, journal, baseURL, dialect, keyEnv, policy, redis, name, schema string
	concurrency, maxAttempts                                                  int
	rpm                                                                       float64
	lease                                                                     time.Duration
	retryFailed, strict, asJSON                                               bool
}

func runBatch(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "status" {
		return runBatchStatus(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("batch", flag.ContinueOnError)
	var f batchFlags
	fs.StringVar(&f.out, "out", "", "write the answers to `FILE` (required)")
	fs.StringVar(&f.errs, "errors", "", "write the failures to `FILE` (default OUTPUT with .errors.jsonl for .jsonl)")
	fs.StringVar(&f.journal, "journal", "", "journal `PATH` or postgres:// URL (default OUTPUT.journal)")
	fs.StringVar(&f.baseURL, "base-url", "", "send to `URL` (default the dialect's provider)")
	fs.StringVar(&f.dialect, "dialect", "openai", "the provider's `dialect`: openai, anthropic or gemini (how the key is sent)")
	fs.StringVar(&f.keyEnv, "api-key-env", "", "read the key from the environment variable `NAME` (default by dialect)")
	fs.IntVar(&f.concurrency, "concurrency", batch.DefaultConcurrency, "requests in flight, from 1 to 1024")
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempts of each request, of every kind of failure, from 1 to 100 (default the policy's)")
	fs.StringVar(&f.policy, "policy", "", "retry policy as rebound's policy JSON in `FILE` (default the recommended one)")
	fs.Float64Var(&f.rpm, "rpm", 0, "requests per minute the provider allows (default: learnt from its headers)")
	fs.StringVar(&f.redis, "redis", "", "share the rate limits with other processes on the Redis at `URL`")
	fs.StringVar(&f.name, "batch-name", "", "name of the batch in a postgres journal (default the input's file name)")
	fs.StringVar(&f.schema, "schema", "", "schema of a postgres journal's tables (default rebound)")
	fs.DurationVar(&f.lease, "lease", 0, "how long a postgres worker holds a request it does not renew (default 30s)")
	fs.BoolVar(&f.retryFailed, "retry-failed", false, "send again the requests that failed permanently in earlier runs")
	fs.BoolVar(&f.strict, "strict", false, "send nothing if any input line is malformed")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object instead of a table")
	rest, code, done := parseInterleaved(fs, args, batchUsage, withStdout(stderr, stdout))
	if done {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "rebound batch: "+format+"\n", a...)
		return 2
	}
	switch {
	case len(rest) == 0:
		return usageErr("no input file (want rebound batch INPUT.jsonl --out OUTPUT.jsonl)")
	case len(rest) > 1:
		return usageErr("unexpected argument %q: one input file at a time", rest[1])
	case f.out == "":
		return usageErr("--out is required: where to write the answers")
	}
	d, ok := dialects[f.dialect]
	if !ok {
		return usageErr("unknown --dialect %q (want openai, anthropic or gemini)", f.dialect)
	}
	if err := checkBatchFlags(&f); err != nil {
		return usageErr("%v", err)
	}
	input := rest[0]
	if f.errs == "" {
		f.errs = strings.TrimSuffix(f.out, ".jsonl") + ".errors.jsonl"
	}
	if f.journal == "" {
		f.journal = f.out + ".journal"
	}
	if f.name == "" {
		f.name = filepath.Base(input)
	}
	if f.baseURL == "" {
		f.baseURL = d.baseURL
	}
	if u, err := url.Parse(f.baseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return usageErr("--base-url %q: want http:// or https://, a host and at most a path", f.baseURL)
	}
	kept := keptPath(f.out)
	files := []string{input, f.out, f.errs, kept}
	if !isPostgres(f.journal) {
		files = append(files, f.journal)
	}
	if sameFiles(files...) {
		return usageErr("the input, --out, --errors, --journal and %s must be different files", kept)
	}
	policy := rebound.Policy{}
	if f.policy != "" {
		b, err := os.ReadFile(f.policy)
		if err != nil {
			return usageErr("--policy: %v", err)
		}
		if err := json.Unmarshal(b, &policy); err != nil {
			return usageErr("--policy %s: %v", f.policy, err)
		}
	}
	if f.maxAttempts > 0 {
		capAttempts(&policy, f.maxAttempts)
	}

	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "rebound batch: "+format+"\n", a...)
		return 1
	}
	// The output is written at the end: a place it cannot go is found
	// before anything is sent.
	for _, out := range []string{f.out, f.errs} {
		if err := writable(out); err != nil {
			return fail("%v", err)
		}
	}
	file, err := readBatchInput(input, stderr)
	if err != nil {
		return fail("%v", err)
	}
	if len(file.Malformed) > 0 && f.strict {
		return fail("%d malformed lines in %s; nothing sent (--strict)", len(file.Malformed), input)
	}
	unrecorded, err := readKept(kept, file.Input().Digest)
	if err != nil {
		return fail("%v", err)
	}

	key := ""
	keyEnv := f.keyEnv
	if keyEnv == "" {
		keyEnv = d.keyEnv
	}
	if key = os.Getenv(keyEnv); key == "" && f.keyEnv != "" {
		return fail("--api-key-env %s: the variable is not set", f.keyEnv)
	}
	r := &batch.Runner{
		BaseURL:     f.baseURL,
		Concurrency: f.concurrency,
		Policy:      policy,
		Options:     batch.Options{RetryFailed: f.retryFailed},
		Unrecorded:  unrecorded,
	}
	if key != "" {
		r.Header = d.header(key)
	}
	if f.rpm > 0 || f.redis != "" {
		limits := ratelimit.Config{RequestsPerMinute: f.rpm}
		if f.redis == "" {
			r.Limiter = ratelimit.New(limits)
		} else {
			cfg, err := reboundredis.Open(f.redis)
			if err != nil {
				return fail("--redis: %v", err)
			}
			// A batch waits on the network anyway: a decision may take a
			// few round trips' worth before it is made alone.
			cfg.Timeout = 50 * time.Millisecond
			cfg.OnChange = func(up bool, err error) {
				if !up {
					fmt.Fprintf(stderr, "rebound batch: redis is away (%v); pacing alone until it is back\n", err)
				} else {
					fmt.Fprintln(stderr, "rebound batch: redis is back")
				}
			}
			defer cfg.Client.Close()
			store, err := reboundredis.New(cfg)
			if err != nil {
				return fail("--redis: %v", err)
			}
			// A first connection takes longer than a decision may wait,
			// and the workers' first decisions come all at once: the
			// pool's connections, made now, are not taken for Redis being
			// away.
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if err := store.Warm(wctx); err != nil {
				fmt.Fprintf(stderr, "rebound batch: --redis: %v; pacing alone until it answers\n", err)
			}
			cancel()
			u, _ := url.Parse(f.baseURL)
			r.Limiter = reboundredis.NewLimiter(store, u.Host, limits)
		}
	}

	j, err := openJournal(ctx, f.journal, reboundpg.Config{Batch: f.name, Schema: f.schema, Lease: f.lease}, false)
	if errors.Is(err, reboundbolt.ErrCorrupt) {
		// What it recorded is lost but for the output files of the runs
		// before; a new journal sends everything again.
		return fail("%v; move it aside to start the batch afresh", err)
	}
	if err != nil {
		return fail("%v", err)
	}
	defer j.Close()

	prog := newProgressPrinter(stderr)
	r.Progress = prog.set
	stopProgress := prog.start()
	summary, runErr := r.Run(ctx, file, j)
	stopProgress()
	// Answers paid for and not in the journal are kept before anything
	// else can fail.
	if err := keepUnrecorded(kept, file.Input().Digest, summary.Unrecorded, unrecorded != nil); err != nil {
		return fail("%v", err)
	}
	switch {
	case len(summary.Unrecorded) > 0:
		fmt.Fprintf(stderr, "rebound batch: %d answers could not be recorded in the journal; they are kept in %s, and the next run records them\n", len(summary.Unrecorded), kept)
	case len(unrecorded) > 0:
		fmt.Fprintf(stderr, "rebound batch: recorded the %d answers kept in %s by an earlier run\n", len(unrecorded), kept)
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) && !errors.Is(runErr, context.DeadlineExceeded) {
		if summary.Sent == 0 {
			return fail("%v", runErr)
		}
		fmt.Fprintf(stderr, "rebound batch: %v\n", runErr)
	}
	// The output is written whatever stopped the run, from what the
	// journal holds.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	written, err := writeBatchOutput(wctx, j, f.out, f.errs)
	if err != nil {
		return fail("%v", err)
	}
	counts, err := j.Counts(wctx)
	if err != nil {
		return fail("reading the journal: %v", err)
	}
	report := batchReport{
		Input: input, Output: f.out, Errors: f.errs, Journal: shownJournal(f.journal),
		Malformed: len(file.Malformed), Journaled: counts,
		Run: batchRun{
			Todo: summary.Todo, Sent: summary.Sent, Resent: summary.Resent,
			Succeeded: summary.Succeeded, Failed: summary.Failed, FailedPermanent: summary.FailedPermanent,
			Attempts: summary.Attempts, Retries: summary.Retries, Interrupted: summary.Interrupted, Unrecorded: len(summary.Unrecorded),
			Seconds: summary.Elapsed.Seconds(), PerSecond: perSecond(summary.Finished(), summary.Elapsed),
		},
	}
	if f.asJSON {
		if code := printJSON(stdout, stderr, report); code != 0 {
			return code
		}
	} else {
		printBatch(stdout, report, written)
	}
	switch {
	case runErr != nil:
		fmt.Fprintln(stderr, "rebound batch: stopped before the end; run the same command again to go on")
		return 1
	case counts.Succeeded != counts.Total:
		return 1
	case len(file.Malformed) > 0:
		fmt.Fprintf(stderr, "rebound batch: %d malformed lines of %s were not sent\n", len(file.Malformed), input)
		return 1
	}
	return 0
}

// keptPath is the file that keeps the answers a run received and could not
// record in its journal: OUTPUT with .unrecorded.jsonl for .jsonl.
func keptPath(out string) string {
	return strings.TrimSuffix(out, ".jsonl") + ".unrecorded.jsonl"
}

// keptAnswer is a line of the file of kept answers. It names the input's
// digest, so that an answer is never recorded as another input's.
type keptAnswer struct {
	Input        string `json:"input_digest"`
	CustomID     string `json:"custom_id"`
	State        string `json:"state"`
	StatusCode   int    `json:"status_code,omitempty"`
	RequestID    string `json:"request_id,omitempty"`
	Body         []byte `json:"body,omitempty"`
	ErrorCode    string `json:"error_code,omitempty"`
	ErrorMessage string `json:"error_message,omitempty"`
	Attempts     int    `json:"attempts,omitempty"`
}

// readKept reads the answers kept at path for the input of digest; none
// if there is no such file.
func readKept(path, digest string) ([]batch.Outcome, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return []batch.Outcome{}, nil // nothing kept, but a file to remove
	}
	states := map[string]batch.State{}
	for s := batch.Succeeded; s <= batch.FailedPermanent; s++ {
		states[s.String()] = s
	}
	var kept []batch.Outcome
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var a keptAnswer
		if err := json.Unmarshal(line, &a); err != nil {
			return nil, fmt.Errorf("%s:%d: %v", path, i+1, err)
		}
		s, ok := states[a.State]
		switch {
		case a.Input != digest:
			return nil, fmt.Errorf("%s holds answers to another input than this one; run that input to record them, or move the file aside", path)
		case !ok || a.CustomID == "":
			return nil, fmt.Errorf("%s:%d: not a kept answer", path, i+1)
		}
		kept = append(kept, batch.Outcome{ID: a.CustomID, State: s, StatusCode: a.StatusCode, RequestID: a.RequestID, Body: a.Body,
			ErrorCode: a.ErrorCode, ErrorMessage: a.ErrorMessage, Attempts: a.Attempts})
	}
	return kept, nil
}

// keepUnrecorded writes the answers of unrecorded to path, whole or not
// at all, or, with none, removes the file of an earlier run's (existed):
// the run recorded them.
func keepUnrecorded(path, digest string, unrecorded []batch.Outcome, existed bool) error {
	if len(unrecorded) == 0 {
		if !existed {
			return nil
		}
		return os.Remove(path)
	}
	err := writeKept(path, digest, unrecorded)
	if err != nil {
		return fmt.Errorf("keeping %d answers the journal could not record: %w", len(unrecorded), err)
	}
	return nil
}

// writeKept writes answers to a file beside path, then renames it path.
func writeKept(path, digest string, answers []batch.Outcome) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, o := range answers {
		enc.Encode(keptAnswer{Input: digest, CustomID: o.ID, State: o.State.String(), StatusCode: o.StatusCode, RequestID: o.RequestID,
			Body: o.Body, ErrorCode: o.ErrorCode, ErrorMessage: o.ErrorMessage, Attempts: o.Attempts})
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// checkBatchFlags checks the numbers among f.
func checkBatchFlags(f *batchFlags) error {
	if err := intFlag("concurrency", f.concurrency, 1, 1024, "a whole number from 1 to 1024"); err != nil {
		return err
	}
	if f.maxAttempts != 0 {
		if err := intFlag("max-attempts", f.maxAttempts, 1, 100, "a whole number from 1 to 100"); err != nil {
			return err
		}
	}
	if err := floatFlag("rpm", f.rpm, 0, 1e9, "a number from 0 (learn it) to 1e9"); err != nil {
		return err
	}
	if f.lease != 0 && (f.lease < time.Second || f.lease > time.Hour) {
		return fmt.Errorf("--lease %v: want from 1s to 1h", f.lease)
	}
	return nil
}

// capAttempts makes every kind of failure stop at n attempts: the policy's
// own count, and any kind's that the policy gives more.
func capAttempts(p *rebound.Policy, n int) {
	p.MaxAttempts = n
	for k, o := range p.PerKind {
		if o.MaxAttempts == 0 || o.MaxAttempts > n {
			o.MaxAttempts = n
			p.PerKind[k] = o
		}
	}
}

// readBatchInput reads the input file and reports its malformed lines on
// stderr, the first few in full.
func readBatchInput(path string, stderr io.Writer) (*batch.File, error) {
	in, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	f, err := batch.Read(in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	const shown = 10
	for i, m := range f.Malformed {
		if i == shown {
			fmt.Fprintf(stderr, "rebound batch: %s: and %d more malformed lines\n", path, len(f.Malformed)-shown)
			break
		}
		fmt.Fprintf(stderr, "rebound batch: %s:%d: %v (skipped)\n", path, m.Line, m.Err)
	}
	return f, nil
}

// openJournal opens the journal at where: PostgreSQL for a postgres://
// or postgresql:// URL, with pg, else the file, read only if readOnly.
func openJournal(ctx context.Context, where string, pg reboundpg.Config, readOnly bool) (batch.Journal, error) {
	if isPostgres(where) {
		return reboundpg.Open(ctx, where, pg) // its errors never show the password
	}
	return reboundbolt.Open(where, reboundbolt.Config{ReadOnly: readOnly})
}

// sameFiles reports whether two of paths name one file: the same path
// however spelt, or the same existing file under two names.
func sameFiles(paths ...string) bool {
	for i, a := range paths {
		for _, b := range paths[i+1:] {
			aa, err1 := filepath.Abs(a)
			bb, err2 := filepath.Abs(b)
			if err1 == nil && err2 == nil && aa == bb {
				return true
			}
			sa, err1 := os.Stat(a)
			sb, err2 := os.Stat(b)
			if err1 == nil && err2 == nil && os.SameFile(sa, sb) {
				return true
			}
		}
	}
	return false
}

// isPostgres reports whether the journal at where is PostgreSQL's.
func isPostgres(where string) bool {
	return strings.HasPrefix(where, "postgres://") || strings.HasPrefix(where, "postgresql://")
}

// shownJournal is where, as a report may show it: a URL without its
// password, in its user part or its query.
func shownJournal(where string) string {
	u, err := url.Parse(where)
	if err != nil || u.Scheme == "" {
		return where
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// writable returns an error if path cannot be written as a file
// replaced whole: it is not a regular file, or nothing can be written
// beside it.
func writable(path string) error {
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	f.Close()
	return os.Remove(f.Name())
}

// writeBatchOutput writes the output and errors files afresh from j, each
// whole or not at all: to a file beside it, then renamed over it.
func writeBatchOutput(ctx context.Context, j batch.Journal, out, errs string) (batch.Written, error) {
	o, err := os.CreateTemp(filepath.Dir(out), filepath.Base(out)+".*.tmp")
	if err != nil {
		return batch.Written{}, err
	}
	defer os.Remove(o.Name())
	defer o.Close()
	e, err := os.CreateTemp(filepath.Dir(errs), filepath.Base(errs)+".*.tmp")
	if err != nil {
		return batch.Written{}, err
	}
	defer os.Remove(e.Name())
	defer e.Close()
	w, err := batch.WriteOutput(ctx, j, o, e)
	if err != nil {
		return w, err
	}
	for _, f := range []*os.File{o, e} {
		if err := f.Chmod(0o644); err != nil { // CreateTemp makes it 0600
			return w, err
		}
		if err := f.Close(); err != nil {
			return w, err
		}
	}
	if err := os.Rename(o.Name(), out); err != nil {
		return w, err
	}
	return w, os.Rename(e.Name(), errs)
}

func perSecond(n int, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// printBatch prints a run's report as a few lines.
func printBatch(w io.Writer, r batchReport, written batch.Written) {
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
}

const batchStatusUsage = `usage: rebound batch status --journal PATH|URL [--batch-name NAME] [--json]

Print how many requests of the batch a journal records as succeeded,
failed, failed permanently, in flight and not yet sent.

flags:
`

func runBatchStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("batch status", flag.ContinueOnError)
	journal := fs.String("journal", "", "journal `PATH` or postgres:// URL (required)")
	name := fs.String("batch-name", "", "name of the batch in a postgres journal (required with one)")
	schema := fs.String("schema", "", "schema of a postgres journal's tables (default rebound)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	if code, done := parseFlags(fs, args, batchStatusUsage, withStdout(stderr, stdout)); done {
		return code
	}
	switch {
	case *journal == "":
		fmt.Fprintln(stderr, "rebound batch status: --journal is required")
		return 2
	case isPostgres(*journal) && *name == "":
		fmt.Fprintln(stderr, "rebound batch status: --batch-name is required with a postgres journal")
		return 2
	}
	if _, err := os.Stat(*journal); err != nil && !isPostgres(*journal) {
		fmt.Fprintf(stderr, "rebound batch status: %v\n", err)
		return 1
	}
	j, err := openJournal(ctx, *journal, reboundpg.Config{Batch: *name, Schema: *schema}, true)
	if err != nil {
		fmt.Fprintf(stderr, "rebound batch status: %v\n", err)
		return 1
	}
	defer j.Close()
	c, err := j.Counts(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "rebound batch status: %v\n", err)
		return 1
	}
	if c.Total == 0 && isPostgres(*journal) {
		fmt.Fprintf(stderr, "rebound batch status: no batch %q in that database (check --batch-name and --schema)\n", *name)
		return 1
	}
	if *asJSON {
		return printJSON(stdout, stderr, c)
	}
	fmt.Fprintf(stdout, "%d requests: %d succeeded, %d failed, %d failed permanently, %d in flight, %d not yet sent\n",
		c.Total, c.Succeeded, c.Failed, c.FailedPermanent, c.InFlight, c.Pending)
	return 0
}

// progressPrinter shows a run's progress on stderr: a bar redrawn in place
// on a terminal, else a line every few seconds.
type progressPrinter struct {
	w        io.Writer
	terminal bool
	every    time.Duration

	mu   sync.Mutex // guards last
	last batch.Progress
}

// batchProgressEvery is how often a run's progress is printed when stderr
// is not a terminal.
var batchProgressEvery = 5 * time.Second

func newProgressPrinter(stderr io.Writer) *progressPrinter {
	p := &progressPrinter{w: stderr, every: batchProgressEvery}
	if s, ok := stderr.(cmdStderr); ok {
		stderr = s.Writer
	}
	if f, ok := stderr.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.terminal, p.every = true, 200*time.Millisecond
		}
	}
	return p
}

func (p *progressPrinter) set(pr batch.Progress) {
	p.mu.Lock()
	p.last = pr
	p.mu.Unlock()
}

// start prints until the returned function is called, which prints the
// last state once more and returns when printing has stopped.
func (p *progressPrinter) start() (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	begun := time.Now()
	wg.Go(func() {
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				p.print(time.Since(begun), false)
			case <-done:
				p.print(time.Since(begun), true)
				return
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// print prints the progress after elapsed; final ends a terminal's line.
func (p *progressPrinter) print(elapsed time.Duration, final bool) {
	p.mu.Lock()
	pr := p.last
	p.mu.Unlock()
	if !p.terminal && final {
		return // the summary follows
	}
	finished := pr.Finished()
	rate := perSecond(finished, elapsed)
	eta := "?"
	if rate > 0 && pr.Todo >= finished {
		eta = time.Duration(float64(time.Second) * float64(pr.Todo-finished) / rate).Round(time.Second).String()
	}
	line := fmt.Sprintf("%d/%d done, %d failed, %d retrying, %.0f/s, ETA %s", pr.Succeeded, pr.Todo, pr.Failed+pr.FailedPermanent, pr.Retrying, rate, eta)
	if !p.terminal {
		fmt.Fprintf(p.w, "rebound batch: %s\n", line)
		return
	}
	const width = 30
	filled := 0
	if pr.Todo > 0 {
		filled = min(width, width*finished/pr.Todo)
	}
	end := ""
	if final {
		end = "\n"
	}
	fmt.Fprintf(p.w, "\r[%s%s] %s\033[K%s", strings.Repeat("#", filled), strings.Repeat(".", width-filled), line, end)
}
