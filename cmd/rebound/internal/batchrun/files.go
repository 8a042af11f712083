package batchrun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/rebound-go/rebound/batch"
	reboundbolt "github.com/rebound-go/rebound/bolt"
	reboundpg "github.com/rebound-go/rebound/postgres"
)

// KeptPath is the file that keeps the answers a run received and could not
// record in its journal: OUTPUT with .unrecorded.jsonl for .jsonl.
func KeptPath(out string) string {
	return strings.TrimSuffix(out, ".jsonl") + ".unrecorded.jsonl"
}

// KeptAnswer is a line of the file of kept answers (see KeptPath). It names the input's
// digest, so that an answer is never recorded as another input's.
type KeptAnswer struct {
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
		var a KeptAnswer
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
		enc.Encode(KeptAnswer{Input: digest, CustomID: o.ID, State: o.State.String(), StatusCode: o.StatusCode, RequestID: o.RequestID,
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

// OpenJournal opens the journal at where, as "rebound batch" does: PostgreSQL for a postgres://
// or postgresql:// URL, with pg, else the file, read only if readOnly.
func OpenJournal(ctx context.Context, where string, pg reboundpg.Config, readOnly bool) (batch.Journal, error) {
	if IsPostgres(where) {
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

// IsPostgres reports whether the journal at where is PostgreSQL's: a
// postgres:// or postgresql:// URL.
func IsPostgres(where string) bool {
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

// Status returns the counts of the journal at where, opened read only: a
// batch of pg in PostgreSQL, or a file.
func Status(ctx context.Context, where string, pg reboundpg.Config) (batch.Counts, error) {
	if _, err := os.Stat(where); err != nil && !IsPostgres(where) {
		return batch.Counts{}, err
	}
	j, err := OpenJournal(ctx, where, pg, true)
	if err != nil {
		return batch.Counts{}, err
	}
	defer j.Close()
	c, err := j.Counts(ctx)
	if err == nil && c.Total == 0 && IsPostgres(where) {
		err = fmt.Errorf("no batch %q in that database (check --batch-name and --schema)", pg.Batch)
	}
	return c, err
}
