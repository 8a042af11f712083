package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cmd/rebound/internal/batchrun"
)

// upstream wraps a handler and counts the requests it serves for each
// custom_id (the test inputs name it in the body's metadata).
type upstream struct {
	h http.Handler

	mu   sync.Mutex // guards sent and total
	sent map[string]int
	// total counts every request, so a test can wait for the next k.
	total int
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var b struct{ Metadata struct{ ID string } }
	json.Unmarshal(body, &b)
	u.mu.Lock()
	if u.sent == nil {
		u.sent = map[string]int{}
	}
	u.sent[b.Metadata.ID]++
	u.total++
	u.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	u.h.ServeHTTP(w, r)
}

// take returns the counts by custom_id so far and starts new ones.
func (u *upstream) take() map[string]int {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.sent
	u.sent = nil
	return s
}

func (u *upstream) requests() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.total
}

// writeInput writes a batch of n chat requests, "req-0" ..., to a file in
// dir and returns its path.
func writeInput(t *testing.T, dir string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":{"id":"req-%d"}}}`+"\n", i, i)
	}
	path := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// quickPolicy writes a policy whose backoff is a few milliseconds, so that
// a test over loopback takes little real time, and returns its path.
func quickPolicy(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(path, []byte(`{"base_delay_ms": 2, "max_delay_ms": 10}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// batchJSON runs "rebound batch" with --json and returns its exit code and
// report.
func batchJSON(t *testing.T, args ...string) (int, batchrun.Report, string) {
	t.Helper()
	code, stdout, stderr := runCmd(append([]string{"batch", "--json"}, args...)...)
	var r batchrun.Report
	if code != 2 {
		if err := json.Unmarshal([]byte(stdout), &r); err != nil {
			t.Fatalf("batch %q: exit %d, stdout %q is not the report: %v; stderr %s", args, code, stdout, err, stderr)
		}
	}
	return code, r, stderr
}

// outputLines reads an output or errors file: the custom_ids of its lines,
// counted.
func outputLines(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ids := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l struct {
			ID       string `json:"id"`
			CustomID string `json:"custom_id"`
			Response *struct {
				StatusCode int `json:"status_code"`
			} `json:"response"`
		}
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil || l.CustomID == "" || !strings.HasPrefix(l.ID, "batch_req_") {
			t.Fatalf("%s: line %q: %v", path, sc.Text(), err)
		}
		ids[l.CustomID]++
	}
	return ids
}

// TestBatchTheArticlesScene runs the 429 article's scene through the
// command over loopback: 200 requests to the chaos server failing 35% of
// them. With one attempt about 130 succeed; the rerun sends only the ones
// that failed, counted by the chaos server, and retries them; with four
// attempts the first run alone answers at least 194.
func TestBatchTheArticlesScene(t *testing.T) {
	srv, err := chaos.New(chaos.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	up := &upstream{h: srv}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in, policy := writeInput(t, dir, 200), quickPolicy(t, dir)
	out := filepath.Join(dir, "out.jsonl")

	// Flags may come after the input, or before it.
	code, first, stderr := batchJSON(t, in, "--out", out, "--base-url", hs.URL, "--max-attempts", "1", "--policy", policy)
	if code != 1 || first.Run.Succeeded < 115 || first.Run.Succeeded > 145 || first.Run.Succeeded+first.Run.Failed != 200 {
		t.Fatalf("first run: exit %d, %+v; want exit 1 and about 130 of 200 succeeded; stderr %s", code, first.Run, stderr)
	}
	if got := srv.Stats().Requests; got != 200 {
		t.Errorf("the chaos server counted %d requests, want 200", got)
	}
	answered, failed := outputLines(t, out), outputLines(t, filepath.Join(dir, "out.errors.jsonl"))
	if len(answered) != first.Run.Succeeded || len(failed) != first.Run.Failed {
		t.Errorf("the output has %d lines and the errors %d, want %d and %d", len(answered), len(failed), first.Run.Succeeded, first.Run.Failed)
	}
	up.take()

	srv.Reset()
	code, second, stderr := batchJSON(t, "--out", out, "--base-url", hs.URL, "--max-attempts", "4", "--policy", policy, in)
	resent := up.take()
	if code != 0 && second.Journaled.Succeeded < 195 {
		t.Errorf("second run: exit %d, %+v; stderr %s", code, second, stderr)
	}
	if len(resent) != len(failed) || second.Run.Sent != len(failed) {
		t.Errorf("the rerun sent %d ids (%d by its count), want the %d that failed", len(resent), second.Run.Sent, len(failed))
	}
	for id := range resent {
		if answered[id] > 0 {
			t.Errorf("the rerun sent %s again, which had succeeded", id)
		}
	}
	if got := srv.Stats().Requests; got != second.Run.Attempts || got <= len(failed) {
		t.Errorf("the rerun: the chaos server counted %d requests, the run %d, for %d ids; want the same, with retries", got, second.Run.Attempts, len(failed))
	}
	all, errs := outputLines(t, out), outputLines(t, filepath.Join(dir, "out.errors.jsonl"))
	for id, n := range all {
		if n != 1 || errs[id] != 0 {
			t.Errorf("%s is %d times in the output and %d in the errors", id, n, errs[id])
		}
	}
	if len(all)+len(errs) != 200 {
		t.Errorf("after the rerun the output has %d and the errors %d: want 200 in all", len(all), len(errs))
	}
	t.Logf("first run %d/200; rerun sent %d in %d requests; %d/200 answered in all", first.Run.Succeeded, second.Run.Sent, second.Run.Attempts, len(all))

	srv.Reset()
	code, fresh, stderr := batchJSON(t, in, "--out", filepath.Join(dir, "fresh.jsonl"), "--base-url", hs.URL, "--max-attempts", "4", "--policy", policy)
	if fresh.Run.Succeeded < 194 {
		t.Errorf("with --max-attempts 4: exit %d, %d of 200 succeeded, want at least 194; stderr %s", code, fresh.Run.Succeeded, stderr)
	}
	t.Logf("with --max-attempts 4: %d/200 in %d requests", fresh.Run.Succeeded, fresh.Run.Attempts)

	code, status, _ := runCmd("batch", "status", "--json", "--journal", out+".journal")
	var c struct{ Total, Succeeded int }
	if err := json.Unmarshal([]byte(status), &c); code != 0 || err != nil || c.Total != 200 || c.Succeeded != len(all) {
		t.Errorf("status: exit %d, %s", code, status)
	}
}

// TestBatchBadInput: malformed lines are named and skipped, or stop the
// run with --strict; a duplicate custom_id and a journal of another input
// stop it before anything is sent.
func TestBatchBadInput(t *testing.T) {
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	write := func(name string, lines ...string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
		return p
	}
	good := `{"custom_id":"a","method":"POST","url":"/v1/x","body":{"metadata":{"id":"a"}}}`
	bad := write("bad.jsonl", good, `{"custom_id":"b"`, `{"custom_id":"c","method":"GET","url":"/v1/x","body":{}}`)

	code, stdout, stderr := runCmd("batch", bad, "--strict", "--out", filepath.Join(dir, "o1.jsonl"), "--base-url", hs.URL)
	if code != 1 || up.requests() != 0 || !strings.Contains(stderr, "bad.jsonl:2: not a JSON object") || !strings.Contains(stderr, "bad.jsonl:3: method \"GET\"") || !strings.Contains(stderr, "nothing sent (--strict)") {
		t.Errorf("--strict: exit %d, %d requests, stdout %q, stderr %q", code, up.requests(), stdout, stderr)
	}
	// Skipped, and the exit code says the batch was not all answered.
	code, _, stderr = runCmd("batch", bad, "--out", filepath.Join(dir, "o2.jsonl"), "--base-url", hs.URL)
	if code != 1 || up.requests() != 1 || !strings.Contains(stderr, "bad.jsonl:2: not a JSON object") || !strings.Contains(stderr, "2 malformed lines") {
		t.Errorf("malformed lines skipped: exit %d, %d requests, stderr %q", code, up.requests(), stderr)
	}

	dup := write("dup.jsonl", good, good)
	code, _, stderr = runCmd("batch", dup, "--out", filepath.Join(dir, "o3.jsonl"), "--base-url", hs.URL)
	if code != 1 || up.requests() != 1 || !strings.Contains(stderr, `custom_id "a" is on line 1 and again on line 2`) {
		t.Errorf("duplicate: exit %d, %d requests, stderr %q", code, up.requests(), stderr)
	}

	other := write("other.jsonl", `{"custom_id":"a","method":"POST","url":"/v1/x","body":{"changed":true}}`)
	code, _, stderr = runCmd("batch", other, "--out", filepath.Join(dir, "o2.jsonl"), "--base-url", hs.URL)
	if code != 1 || up.requests() != 1 || !strings.Contains(stderr, "different input") {
		t.Errorf("another input, same journal: exit %d, %d requests, stderr %q", code, up.requests(), stderr)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{}, "no input file"},
		{[]string{bad}, "--out is required"},
		{[]string{bad, bad, "--out", "x"}, "one input file at a time"},
		{[]string{bad, "--out", "x", "--dialect", "cohere"}, "unknown --dialect"},
		{[]string{bad, "--out", "x", "--concurrency", "0"}, "--concurrency 0"},
		{[]string{bad, "--out", "x", "--max-attempts", "1000"}, "--max-attempts 1000"},
		{[]string{bad, "--out", "x", "--base-url", "ftp://h"}, "--base-url"},
		{[]string{bad, "--out", "x", "--lease", "1ms"}, "--lease"},
		{[]string{bad, "--out", bad}, "must be different files"},
		{[]string{bad, "--out", filepath.Dir(bad) + "/./" + filepath.Base(bad)}, "must be different files"},
		{[]string{bad, "--out", "x.jsonl", "--errors", "x.jsonl.journal"}, "must be different files"},
		{[]string{bad, "--out", "x.jsonl", "--journal", "./x.jsonl"}, "must be different files"},
		{[]string{bad, "--out", "x", "--base-url", "http://h/?key=k"}, "--base-url"},
		{[]string{bad, "--out", "x", "--policy", write("p.json", `{"max_attempts": -1}`)}, "--policy"},
		{[]string{bad, "--out", "x", "--rpm", "NaN"}, "--rpm"},
		{[]string{bad, "--out", "x", "--base-url", hs.URL, "--api-key-env", "REBOUND_TEST_UNSET_KEY"}, "--api-key-env REBOUND_TEST_UNSET_KEY: the variable is not set"},
	} {
		code, stdout, stderr := runCmd(append([]string{"batch"}, c.args...)...)
		if code != 2 || stdout != "" || !strings.Contains(stderr, c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("batch %q: exit %d, stdout %q, stderr %q; want 2 and one line with %q", c.args, code, stdout, stderr, c.want)
		}
	}
	if up.requests() != 1 {
		t.Errorf("bad usage sent %d requests", up.requests()-1)
	}
}

// TestBatchRefusesToSendToAProviderWithoutAKey: with its key's variable
// unset, a batch for a provider's own API stops at once, in one line with
// exit 2, whichever the dialect and however the URL is spelled; one for
// a server of the user's own (a local model) is sent without a key, and
// says so once.
func TestBatchRefusesToSendToAProviderWithoutAKey(t *testing.T) {
	for _, v := range []string{"OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"} {
		t.Setenv(v, "")
	}
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			w.WriteHeader(400)
		}
		w.Write([]byte(`{"ok":true}`))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in, out := writeInput(t, dir, 3), filepath.Join(dir, "out.jsonl")
	code, _, stderr := runCmd("batch", in, "--out", out, "--base-url", hs.URL)
	if code != 0 || up.requests() != 3 || strings.Count(stderr, "OPENAI_API_KEY is not set") != 1 || !strings.Contains(stderr, "without a key") {
		t.Fatalf("to a local server: exit %d, %d requests, stderr %q; want all 3 answered, and no key said once", code, up.requests(), stderr)
	}
	// The journal now has nothing left to send: should the refusal fail,
	// the runs below reach no provider.
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "OPENAI_API_KEY is not set"},
		{[]string{"--base-url", "https://api.openai.com/v1"}, "OPENAI_API_KEY is not set"},
		{[]string{"--base-url", "https://API.OpenAI.com.:443/v1/"}, "OPENAI_API_KEY is not set"},
		{[]string{"--dialect", "anthropic"}, "ANTHROPIC_API_KEY is not set"},
		{[]string{"--dialect", "gemini"}, "GEMINI_API_KEY is not set"},
		{[]string{"--dialect", "anthropic", "--base-url", "https://api.openai.com"}, "ANTHROPIC_API_KEY is not set"},
	} {
		code, stdout, stderr := runCmd(append([]string{"batch", in, "--out", out}, c.args...)...)
		if code != 2 || stdout != "" || !strings.HasPrefix(stderr, "rebound batch: "+c.want) || strings.Count(stderr, "\n") != 1 {
			t.Errorf("batch %q: exit %d, stdout %q, stderr %q; want 2 and one line: %s", c.args, code, stdout, stderr, c.want)
		}
	}
	if up.requests() != 3 {
		t.Errorf("%d requests after the refusals", up.requests())
	}
}

// TestBatchSaysHowToSendPermanentFailuresAgain: a run that ends with
// requests failed permanently, sent by it or by an earlier run, says how
// to send them again; that run sends them.
func TestBatchSaysHowToSendPermanentFailuresAgain(t *testing.T) {
	var fixed atomic.Bool
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if body, _ := io.ReadAll(r.Body); !fixed.Load() && bytes.Contains(body, []byte(`"req-1"`)) {
			w.WriteHeader(400)
			w.Write([]byte(`{"error":{"message":"bad","type":"invalid_request_error"}}`))
			return
		}
		w.Write([]byte(`{"ok":true}`))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in, out := writeInput(t, dir, 3), filepath.Join(dir, "out.jsonl")
	args := []string{"batch", in, "--out", out, "--base-url", hs.URL}
	const hint = "1 failed permanently; run the same command with --retry-failed to send them again"
	for _, run := range []string{"the first run", "the next"} {
		code, stdout, stderr := runCmd(args...)
		if code != 1 || !strings.Contains(stdout, hint) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1 and %q", run, code, stdout, stderr, hint)
		}
	}
	fixed.Store(true)
	code, stdout, stderr := runCmd(append(args, "--retry-failed")...)
	if code != 0 || !strings.Contains(stdout, "this run: 1 sent") || strings.Contains(stdout, "--retry-failed") {
		t.Errorf("with --retry-failed: exit %d, stdout %q, stderr %q; want the one sent, and answered", code, stdout, stderr)
	}
}

// TestBatchSaysBatchOnce: an error of the batch package is said as the
// command's, never "rebound batch: batch: ...", nor with the package's
// prefix after the name of the file it is about.
func TestBatchSaysBatchOnce(t *testing.T) {
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in, out := writeInput(t, dir, 2), filepath.Join(dir, "out.jsonl")
	if code, _, stderr := runCmd("batch", in, "--out", out, "--base-url", hs.URL); code != 0 {
		t.Fatalf("first run: exit %d, stderr %q", code, stderr)
	}
	other := filepath.Join(dir, "other.jsonl")
	os.WriteFile(other, []byte(`{"custom_id":"req-0","method":"POST","url":"/v1/x","body":{"changed":true}}`+"\n"), 0o644)
	dup := filepath.Join(dir, "dup.jsonl")
	line := `{"custom_id":"a","method":"POST","url":"/v1/x","body":{}}` + "\n"
	os.WriteFile(dup, []byte(line+line), 0o644)
	for _, c := range []struct{ in, journal, want string }{
		{other, out + ".journal", ".journal: the journal was made from a different input"},
		{dup, "", `rebound batch: ` + dup + `: custom_id "a" is on line 1`},
	} {
		args := []string{"batch", c.in, "--out", filepath.Join(dir, "o.jsonl"), "--base-url", hs.URL}
		if c.journal != "" {
			args = append(args, "--journal", c.journal)
		}
		code, _, stderr := runCmd(args...)
		if code != 1 || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "batch: batch:") || strings.Contains(stderr, ": batch: ") {
			t.Errorf("%s: exit %d, stderr %q; want 1 and %q", c.in, code, stderr, c.want)
		}
	}
}

// TestBatchHelp: the command's help, asked for in each way, on stdout.
func TestBatchHelp(t *testing.T) {
	code, help, stderr := runCmd("help", "batch")
	if code != 0 || stderr != "" || !strings.HasPrefix(help, "usage: rebound batch") || !strings.Contains(help, "-journal") {
		t.Fatalf("help batch: exit %d, stderr %q, stdout %q", code, stderr, help)
	}
	for _, args := range [][]string{{"batch", "-h"}, {"batch", "in.jsonl", "--out", "x", "--help"}} {
		if code, stdout, _ := runCmd(args...); code != 0 || stdout != help {
			t.Errorf("%q: exit %d, stdout %q", args, code, stdout)
		}
	}
	if code, stdout, _ := runCmd("batch", "status", "-h"); code != 0 || !strings.HasPrefix(stdout, "usage: rebound batch status") {
		t.Errorf("batch status -h: exit %d, stdout %q", code, stdout)
	}
	if code, _, stderr := runCmd("batch", "status"); code != 2 || !strings.Contains(stderr, "--journal is required") {
		t.Errorf("batch status without --journal: exit %d, stderr %q", code, stderr)
	}
}

// TestBatchProgress: without a terminal, a line every so often on stderr.
func TestBatchProgress(t *testing.T) {
	defer func(d time.Duration) { batchrun.ProgressEvery = d }(batchrun.ProgressEvery)
	batchrun.ProgressEvery = time.Millisecond
	slow := make(chan struct{})
	var once sync.Once
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-slow // held until a progress line has been printed
		w.Write([]byte(`{"ok":true}`))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 20)
	stderr := &watchWriter{want: "0/20 done", seen: func() { once.Do(func() { close(slow) }) }}
	var stdout bytes.Buffer
	code := run(context.Background(), []string{"batch", in, "--out", filepath.Join(dir, "out.jsonl"), "--base-url", hs.URL}, &stdout, stderr)
	if code != 0 || !strings.Contains(stderr.String(), "rebound batch: 0/20 done, 0 failed, 0 retrying") || !strings.Contains(stdout.String(), "20 succeeded") {
		t.Errorf("exit %d, stderr %q, stdout %q", code, stderr.String(), stdout.String())
	}
}

// TestBatchProgressSaysWhatItWaitsFor: while a request waits out the
// Retry-After of a 429, the progress lines say so, not just "1 retrying".
func TestBatchProgressSaysWhatItWaitsFor(t *testing.T) {
	defer func(d time.Duration) { batchrun.ProgressEvery = d }(batchrun.ProgressEvery)
	batchrun.ProgressEvery = time.Millisecond
	var n atomic.Int32
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Write([]byte(`{"ok":true}`))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 1)
	var stdout bytes.Buffer
	var stderr lockedBuffer
	code := run(context.Background(), []string{"batch", in, "--out", filepath.Join(dir, "out.jsonl"), "--base-url", hs.URL}, &stdout, &stderr)
	want := "0/1 done, 0 failed, 1 retrying"
	if code != 0 || !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "waiting for 1 wait the provider asked for") {
		t.Errorf("exit %d, stderr %q; want a line with %q that says it waits for the provider's Retry-After", code, firstLines(stderr.String(), 6), want)
	}
}

// watchWriter keeps what is written, and calls seen once it holds want.
type watchWriter struct {
	lockedBuffer
	want string
	seen func()
}

func (w *watchWriter) Write(p []byte) (int, error) {
	n, err := w.lockedBuffer.Write(p)
	if strings.Contains(w.String(), w.want) {
		w.seen()
	}
	return n, err
}

// arrivals counts an upstream's requests and says when it has seen n.
type arrivals struct {
	mu     sync.Mutex // guards n, target and reached
	n      int
	target int
	// reached is closed when n reaches target.
	reached chan struct{}
}

func (a *arrivals) arrived() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.n++
	if a.reached != nil && a.n >= a.target {
		close(a.reached)
		a.reached = nil
	}
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.n
}

// after returns a channel closed once k more requests have arrived.
func (a *arrivals) after(k int) <-chan struct{} {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.target, a.reached = a.n+k, make(chan struct{})
	return a.reached
}

// TestBatchSurvivesSIGKILL kills "rebound batch" with SIGKILL over and
// over, each time after a random number of requests (seeded), and then
// lets it finish: every custom_id is in the output exactly once, and no
// request is sent again beyond those in flight at a kill, which the run
// that sends them again reports as resent.
func TestBatchSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	const (
		items       = 1200
		kills       = 8
		concurrency = 16
	)
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	var (
		mu      sync.Mutex // guards latency
		latency = rand.New(rand.NewPCG(seed, 1))
		arrived = &arrivals{}
	)
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.arrived()
		mu.Lock()
		d := time.Duration(200+latency.IntN(2000)) * time.Microsecond
		mu.Unlock()
		select { // a provider's latency
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		w.Write([]byte(`{"choices":[{"message":{"content":"ok"}}]}`))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in, out := writeInput(t, dir, items), filepath.Join(dir, "out.jsonl")
	args := []string{"batch", in, "--out", out, "--base-url", hs.URL, "--concurrency", fmt.Sprint(concurrency), "--json"}

	sendsByRun := killRuns(t, args, kills, rng, up, arrived)
	code, report, stderr := batchJSON(t, args[1:]...)
	last := up.take()
	if code != 0 || report.Journaled.Succeeded != items {
		t.Fatalf("the run after %d kills: exit %d, %+v; stderr %s", kills, code, report, stderr)
	}
	got := outputLines(t, out)
	if len(got) != items {
		t.Errorf("the output has %d custom_ids, want %d", len(got), items)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s is in the output %d times", id, n)
		}
	}

	again, lastAgain := resends(sendsByRun, last)
	// Every send beyond an id's first repeats a request that was in
	// flight at a kill: at most the concurrency for each kill.
	if again > concurrency*kills {
		t.Errorf("%d requests were sent again over %d kills, more than %d in flight at each", again, kills, concurrency)
	}
	// The last run reports each it sends again.
	if lastAgain > report.Run.Resent {
		t.Errorf("the last run sent %d requests that earlier runs had sent, and reported %d as resent", lastAgain, report.Run.Resent)
	}
	t.Logf("seed %d: %d kills; %d requests sent again in all (the bound is %d); the last run sent %d, %d of them again, and reported %d resent",
		seed, kills, again, concurrency*kills, report.Run.Sent, lastAgain, report.Run.Resent)
}

// killRuns starts "rebound batch" with args and kills it with SIGKILL
// after a random number of requests (1 to 120, drawn from rng), kills
// times, and returns the ids each run sent.
func killRuns(t *testing.T, args []string, kills int, rng *rand.Rand, up *upstream, arrived *arrivals) []map[string]int {
	t.Helper()
	var sendsByRun []map[string]int
	for killed := 0; killed < kills; {
		k := 1 + rng.IntN(120)
		cmd := commandProcess(t, args...)
		var stderr lockedBuffer
		cmd.Stderr = &stderr
		reached := arrived.after(k)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case <-reached:
			cmd.Process.Kill()
			<-exited
			killed++
		case err := <-exited:
			t.Fatalf("run %d ended by itself before %d requests (%v): %s", len(sendsByRun)+1, k, err, stderr.String())
		}
		sendsByRun = append(sendsByRun, up.take())
	}
	return sendsByRun
}

// resends counts the sends beyond each id's first over the runs killed
// (sendsByRun) and the last, and the ids the last run sent that an
// earlier one had.
func resends(sendsByRun []map[string]int, last map[string]int) (again, lastAgain int) {
	sent := map[string]int{}
	for _, run := range append(sendsByRun, last) {
		for id, n := range run {
			sent[id] += n
		}
	}
	for _, n := range sent {
		again += n - 1
	}
	before := map[string]bool{}
	for _, run := range sendsByRun {
		for id := range run {
			before[id] = true
		}
	}
	for id := range last {
		if before[id] {
			lastAgain++
		}
	}
	return again, lastAgain
}

// testSeed returns the seed of a test's randomness: REBOUND_TEST_SEED, or
// 1. It is logged, so a failure can be run again with it.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(1)
	if s := os.Getenv("REBOUND_TEST_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("REBOUND_TEST_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d (REBOUND_TEST_SEED)", seed)
	return seed
}

// TestBatchOutputNowhere: an output that cannot be written is found before
// anything is sent, not after the batch has been paid for.
func TestBatchOutputNowhere(t *testing.T) {
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{}`)) })}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in := writeInput(t, dir, 3)
	code, _, stderr := runCmd("batch", in, "--out", filepath.Join(dir, "no-such-dir", "out.jsonl"), "--base-url", hs.URL)
	if code != 1 || up.requests() != 0 || !strings.Contains(stderr, "no-such-dir") {
		t.Errorf("exit %d, %d requests, stderr %q; want 1, none sent, and the path", code, up.requests(), stderr)
	}
}

// TestBatchInterrupted: SIGINT stops a run cleanly: the answers so far are
// written, the exit code is 1, and the next run sends the rest, the
// requests cut short reported as resent.
func TestBatchInterrupted(t *testing.T) {
	const items = 200
	arrived := &arrivals{}
	var (
		mu   sync.Mutex // guards hold
		hold = true
	)
	up := &upstream{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived.arrived()
		mu.Lock()
		h := hold
		mu.Unlock()
		if h && arrived.count() > 50 { // the rest hang until the client goes away
			<-r.Context().Done()
			return
		}
		w.Write([]byte(`{"ok":true}`))
	})}
	hs := httptest.NewServer(up)
	defer hs.Close()
	dir := t.TempDir()
	in, out := writeInput(t, dir, items), filepath.Join(dir, "out.jsonl")
	args := []string{"batch", in, "--out", out, "--base-url", hs.URL, "--concurrency", "8", "--json"}
	cmd := commandProcess(t, args...)
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	reached := arrived.after(58) // 50 answered, 8 hanging
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	<-reached
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	var report batchrun.Report
	json.Unmarshal([]byte(stdout.String()), &report)
	if cmd.ProcessState.ExitCode() != 1 || !report.Run.Interrupted || !strings.Contains(stderr.String(), "stopped before the end") {
		t.Fatalf("interrupted: %v, %+v; stderr %s", err, report.Run, stderr.String())
	}
	if got := outputLines(t, out); len(got) != report.Run.Succeeded || len(got) < 50 {
		t.Errorf("the output has %d lines; the run says %d succeeded", len(got), report.Run.Succeeded)
	}
	first := up.take()
	mu.Lock()
	hold = false
	mu.Unlock()
	code, next, stderrText := batchJSON(t, args[1:]...)
	if code != 0 || next.Run.Sent != items-report.Run.Succeeded || next.Run.Resent != len(first)-report.Run.Succeeded {
		t.Errorf("the next run: exit %d, %+v; want the %d unanswered sent, the %d cut short among them resent; stderr %s",
			code, next.Run, items-report.Run.Succeeded, len(first)-report.Run.Succeeded, stderrText)
	}
}
