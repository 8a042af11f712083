package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/cmd/rebound/internal/analyze"
)

func runAnalyzeCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"analyze"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// analyzeLog is a small log in both schemas: the $340 article's 400s retried three
// times by a naive client, and rebound's own records.
const analyzeLog = `{"model":"gpt-4o","succeeded":false,"status":400,"error_type":"invalid_request_error","error_code":"context_length_exceeded","retried":true,"attempts":4,"input_tokens":100000}
{"model":"gpt-4o","succeeded":false,"status":400,"error_type":"invalid_request_error","error_code":"context_length_exceeded","retried":true,"attempts":4,"input_tokens":100000}
{"model":"gpt-4o","succeeded":true,"status":429,"error_code":"rate_limit_exceeded","retried":true,"attempts":2,"input_tokens":1000,"output_tokens":200}
{"model":"gpt-4o","succeeded":true,"input_tokens":1000,"output_tokens":200}
{"time":"2025-03-01T00:00:00Z","level":"WARN","msg":"rebound.call","target":"gpt-4o:plan","attempts":1,"succeeded":false,"kind":"quota_exhausted","status":429,"error_type":"insufficient_quota","error_code":"insufficient_quota","reason":"not_retryable","waited_ms":0}
{"time":"2025-03-01T00:00:01Z","level":"INFO","msg":"rebound.retry","target":"gpt-4o:plan","attempt":1}
{"time":"2025-03-01T00:00:02Z","level":"INFO","msg":"rebound.call","target":"gpt-4o:plan","attempts":3,"succeeded":true,"waited_ms":900}
`

func writeLog(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAnalyzeJSON checks that --json prints exactly one object with the
// documented keys and the right figures, flags after the file included.
func TestAnalyzeJSON(t *testing.T) {
	path := writeLog(t, "calls.jsonl", analyzeLog)
	code, stdout, stderr := runAnalyzeCmd(t, path, "--json", "--price-in", "2.5", "--price-out", "10")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	raw := oneJSONObject(t, stdout)
	if keys := sortedKeys(raw); !slices.Equal(keys, []string{"calls", "files", "lines", "malformed", "rows", "skipped", "totals"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	var r analyze.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Lines != 7 || r.Calls != 6 || r.Skipped != 1 || r.Malformed != 0 || len(r.Files) != 1 || r.Files[0].Name != path {
		t.Errorf("header %+v", r)
	}
	top := r.Rows[0]
	if top.Group != "400 context_length_exceeded" || top.Calls != 2 || top.Retries != 6 || !top.Futile ||
		top.Recommendation != "never retry; compact or fall back" || top.WastedUSD == nil || *top.WastedUSD != 2 {
		t.Errorf("first row %+v", top)
	}
	tot := r.Totals
	if tot.Calls != 6 || tot.Succeeded != 3 || tot.FutileRetries != 6 || tot.FutileRetryCostUSD == nil ||
		*tot.FutileRetryCostUSD != 1.5 || tot.PricedCalls != 4 {
		t.Errorf("totals %+v", tot)
	}
}

func TestAnalyzeTable(t *testing.T) {
	path := writeLog(t, "calls.jsonl", analyzeLog)
	code, stdout, stderr := runAnalyzeCmd(t, "--price-in", "2.5", "--price-out", "10", path)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"1 file, 7 lines: 6 calls, 1 skipped, 0 malformed",
		"400 context_length_exceeded: 2 calls, 6 retries, $2.00 wasted; never retry; compact or fall back",
		"retries spent on errors that can never succeed: 6, $1.50",
		"cost $2.01 (known for 4 of 6 calls), wasted $2.00 (99.6%), $1.01 per successful call",
		"429 insufficient_quota",
		"quota_exhausted",
		"! never retry; compact or fall back",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in\n%s", want, stdout)
		}
	}
	// The table lists the costliest row first.
	if lines := strings.Split(stdout, "\n"); !strings.HasPrefix(lines[3], "400 context_length_exceeded") {
		t.Errorf("first row %q", lines[3])
	}
	// Without prices, only the attempts are known.
	_, stdout, _ = runAnalyzeCmd(t, path)
	for _, want := range []string{"cost unknown", "400 context_length_exceeded: 2 calls, 6 retries, 8 attempts wasted"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in\n%s", want, stdout)
		}
	}
}

func TestAnalyzeStdinAndMalformed(t *testing.T) {
	old := analyzeStdin
	t.Cleanup(func() { analyzeStdin = old })
	analyzeStdin = strings.NewReader("{\"succeeded\":true}\nnot json\n{\"succeeded\":false,\"status\":503}\n" +
		`{"succeeded":"no"}` + "\n" + strings.Repeat("x", analyze.MaxLineBytes+1) + "\n")
	path := writeLog(t, "more.jsonl", analyzeLog+"{oops\n")
	code, stdout, stderr := runAnalyzeCmd(t, "--json", "-", path)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := "rebound analyze: -: 3 of 5 lines malformed (line 2, 4, 5)\n" +
		"rebound analyze: " + path + ": 1 of 8 lines malformed (line 8)\n"
	if stderr != want {
		t.Errorf("stderr\n%s\nwant\n%s", stderr, want)
	}
	var r analyze.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Lines != 13 || r.Calls != 8 || r.Malformed != 4 || len(r.Files) != 2 || r.Files[0].Name != "-" ||
		!slices.Equal(r.Files[0].MalformedLines, []int64{2, 4, 5}) {
		t.Errorf("report %+v", r)
	}
}

func TestAnalyzeBadUsage(t *testing.T) {
	path := writeLog(t, "calls.jsonl", analyzeLog)
	for _, args := range [][]string{
		{},
		{"--json"},
		{"--price-in", "-1", path},
		{"--price-out", "x", path},
		{"--bogus", path},
		{"--generate", "0"},
		{"--generate", "10", path},
		{"--generate", "10", "--json"},
		{"--seed", "3", path},
		{"--price-in", "1e308", "--price-out", "1e308", path},
		{"--price-in", "1000001", path},
		{"--price-out", "NaN", path},
		{"--price-out", "Inf", path},
		{"--price-in", "-Inf", path},
		{"--price-in", "1e400", path},
		{"--run-cap", "-1", path},
		{"--tenant-cap", "NaN", path},
		{"--run-cap", "1e10", path},
		{"--tenant-cap", "five", path},
		{"--generate", "10", "--run-cap", "1"},
		{"--generate", "10", "--tenant-cap", "1"},
		{"--price-cache-read", "0.3", path},
		{"--price-out", "15", "--price-cache-write", "3.75", path},
		{"--price-in", "3", "--price-cache-read", "-1", path},
		{"--price-in", "3", "--price-cache-write", "NaN", path},
		{"--price-in", "3", "--price-cache-read", "1e7", path},
		{"--generate", "10", "--price-cache-read", "1"},
	} {
		code, stdout, stderr := runAnalyzeCmd(t, args...)
		if code != 2 || stdout != "" || !strings.HasPrefix(stderr, "rebound analyze: ") || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// A file that cannot be read fails with exit 1 and one line.
	code, stdout, stderr := runAnalyzeCmd(t, path, filepath.Join(t.TempDir(), "missing.jsonl"))
	if code != 1 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "missing.jsonl") {
		t.Errorf("missing file: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	if code, stdout, stderr := runAnalyzeCmd(t, "-h"); code != 0 || stderr != "" || !strings.Contains(stdout, "usage: rebound analyze") ||
		!strings.Contains(stdout, "-price-in") {
		t.Errorf("-h: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"analyse"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "want analyze,") {
		t.Errorf("unknown command: exit %d, %q", code, errOut.String())
	}
}

// TestAnalyzeDoubleDash checks that "--" ends the flags, so that a file
// may be named like one.
func TestAnalyzeDoubleDash(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	if err := os.WriteFile("--json", []byte(`{"succeeded":true}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runAnalyzeCmd(t, "--json", "--", "--json")
	if code != 0 || !strings.Contains(stdout, `"calls": 1`) {
		t.Errorf("exit %d, %s %s", code, stdout, stderr)
	}
}

func TestAnalyzeGenerate(t *testing.T) {
	code, lines, stderr := runAnalyzeCmd(t, "--generate", "3000", "--seed", "4")
	if code != 0 || stderr != "" || strings.Count(lines, "\n") != 3000 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if _, again, _ := runAnalyzeCmd(t, "--generate", "3000", "--seed", "4"); again != lines {
		t.Error("same seed, different lines")
	}
	path := writeLog(t, "gen.jsonl", lines)
	code, stdout, stderr := runAnalyzeCmd(t, "--json", path)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var r analyze.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Lines != 3000 || r.Malformed != 0 || r.Totals.FutileRetries == 0 {
		t.Errorf("lines %d malformed %d futile %d", r.Lines, r.Malformed, r.Totals.FutileRetries)
	}
}

// TestAnalyzeAbsurdPrice checks the one line that refuses a price.
func TestAnalyzeAbsurdPrice(t *testing.T) {
	path := writeLog(t, "calls.jsonl", analyzeLog)
	code, stdout, stderr := runAnalyzeCmd(t, "--price-in", "2", "--price-out", "1e308", path)
	want := "rebound analyze: --price-out 1e+308 is not a price: want US dollars per million tokens, from 0 to 1000000\n"
	if code != 2 || stdout != "" || stderr != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 and %q", code, stdout, stderr, want)
	}
	// The highest price is a price.
	if code, _, stderr := runAnalyzeCmd(t, "--price-in", "1e6", "--price-out", "1000000", path); code != 0 {
		t.Errorf("--price-in 1e6: exit %d, %s", code, stderr)
	}
}

// TestAnalyzeHugeFigures checks that the largest counts at the highest
// prices still give one valid JSON object, and a table without Inf or NaN.
func TestAnalyzeHugeFigures(t *testing.T) {
	line := fmt.Sprintf(`{"succeeded":%%v,"status":%%d,"attempts":%d,"input_tokens":%d,"output_tokens":%d}`+"\n",
		analyze.MaxAttempts, int64(math.MaxInt64), int64(math.MaxInt64))
	path := writeLog(t, "huge.jsonl", strings.Repeat(fmt.Sprintf(line, true, 0)+fmt.Sprintf(line, false, 400), 3))
	code, stdout, stderr := runAnalyzeCmd(t, "--json", "--price-in", "1e6", "--price-out", "1e6", path)
	if code != 0 || stderr != "" {
		t.Fatalf("--json: exit %d: %s", code, stderr)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	var r analyze.Report
	if err := dec.Decode(&r); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON object (%v):\n%s", err, stdout)
	}
	if r.Totals.CostUSD == nil || *r.Totals.CostUSD < 1e25 {
		t.Errorf("cost %v, want above 1e25", r.Totals.CostUSD)
	}
	code, stdout, stderr = runAnalyzeCmd(t, "--price-in", "1e6", "--price-out", "1e6", path)
	if code != 0 || stderr != "" || strings.Contains(stdout, "Inf") || strings.Contains(stdout, "NaN") {
		t.Errorf("table: exit %d, stderr %q:\n%s", code, stderr, stdout)
	}
}

// TestAnalyzeNoCalls checks that input without a single call fails, in
// one line, whether it is empty, binary or holds only other records.
func TestAnalyzeNoCalls(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	empty := file("empty.jsonl", "")
	binary := file("a.out", "\x7fELF\x02\x01\x01\x00\x00\n\x00\x00\x03\x00>\x00\x01\x00\x00\x00\x00\x00")
	other := file("other.jsonl", `{"msg":"rebound.retry","attempt":1}`+"\n\n"+`{"level":"INFO"}`+"\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{empty}, "rebound analyze: no calls in " + empty + ": it is empty\n"},
		{[]string{"--json", empty}, "rebound analyze: no calls in " + empty + ": it is empty\n"},
		{[]string{binary}, "rebound analyze: no calls in " + binary + ": 2 lines, 2 malformed (line 1, 2), 0 skipped\n"},
		{[]string{other}, "rebound analyze: no calls in " + other + ": 3 lines, 0 malformed, 3 skipped\n"},
		{[]string{empty, empty}, "rebound analyze: no calls in 2 files: they are empty\n"},
		{[]string{"--json", empty, binary, other}, "rebound analyze: no calls in 3 files: 5 lines, 2 malformed, 3 skipped\n"},
	} {
		code, stdout, stderr := runAnalyzeCmd(t, c.args...)
		if code != 1 || stdout != "" || stderr != c.want {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	// One file with calls is enough; the others are reported on stderr.
	good := file("good.jsonl", `{"succeeded":true}`+"\n")
	code, stdout, stderr := runAnalyzeCmd(t, "--json", binary, good)
	if code != 0 || stderr != "rebound analyze: "+binary+": 2 of 2 lines malformed (line 1, 2)\n" || !strings.Contains(stdout, `"calls": 1`) {
		t.Errorf("binary and good: exit %d, stderr %q, stdout %s", code, stderr, stdout)
	}
}

// analyzeCapsLog is a log of three runs of two tenants, in both schemas:
// r-1 has a call refused by its cap, r-2 passed its cap, r-3 logs none.
const analyzeCapsLog = `{"msg":"rebound.call","target":"gpt-4o:plan","attempts":1,"succeeded":true,"run":"r-1","tenant":"acme","run_cap_usd":0.5,"tenant_cap_usd":20,"cost":0.21}
{"msg":"rebound.call","target":"gpt-4o:plan","attempts":2,"succeeded":true,"run":"r-1","tenant":"acme","run_cap_usd":0.5,"tenant_cap_usd":20,"cost":0.24}
{"msg":"rebound.call","target":"gpt-4o:plan","attempts":1,"succeeded":false,"kind":"transient","reason":"refused by the guard","run":"r-1","tenant":"acme","run_cap_usd":0.5,"tenant_cap_usd":20}
{"succeeded":true,"run":"r-2","tenant":"acme","run_cap_usd":0.5,"input_tokens":100000,"output_tokens":30000}
{"succeeded":true,"run":"r-3","tenant":"globex","cost":0.1}
{"succeeded":true,"model":"gpt-4o","input_tokens":1000,"output_tokens":200}
`

// TestAnalyzeCapsTable checks the runs' and tenants' table: who passed
// or came nearest their caps first, calls refused counted, a cap given by
// flag for runs that log none.
func TestAnalyzeCapsTable(t *testing.T) {
	path := writeLog(t, "caps.jsonl", analyzeCapsLog)
	code, stdout, stderr := runAnalyzeCmd(t, "--price-in", "2.5", "--price-out", "10", "--run-cap", "0.2", path)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, runs, ok := strings.Cut(stdout, "\nruns: ")
	if !ok {
		t.Fatalf("no runs in\n%s", stdout)
	}
	want := `3; 1 passed its cap, 1 had calls refused by a cap
run  calls  refused  spend    cap      of cap  passed
r-2  1      0        $0.5500  $0.5000  110.0%  ! yes
r-1  3      1        $0.4500  $0.5000  90.0%   no
r-3  1      0        $0.1000  $0.2000  50.0%   no

tenants: 2; 0 passed their cap, 1 had calls refused by a cap
tenant  calls  refused  spend    cap     of cap  passed
acme    4      1        $1.00    $20.00  5.0%    no
globex  1      0        $0.1000  -       -       -
`
	if runs != want {
		t.Errorf("runs and tenants\n%s\nwant\n%s", runs, want)
	}
	// The rows above them are what they would be without runs.
	plain := writeLog(t, "plain.jsonl", regexp.MustCompile(`,"(run|tenant|run_cap_usd|tenant_cap_usd)":("[^"]*"|[0-9.]+)`).
		ReplaceAllString(analyzeCapsLog, ""))
	_, without, _ := runAnalyzeCmd(t, "--price-in", "2.5", "--price-out", "10", plain)
	if head, _, _ := strings.Cut(stdout, "\nruns: "); head != without {
		t.Errorf("with runs\n%s\nwithout\n%s", head, without)
	}
}

// TestAnalyzeCapsBounded checks that the table lists the first 20 runs
// and counts the rest, and --json lists them all.
func TestAnalyzeCapsBounded(t *testing.T) {
	var log strings.Builder
	for i := range 25 {
		fmt.Fprintf(&log, `{"succeeded":true,"run":"run-%02d","run_cap_usd":1,"cost":%v}`+"\n", i, float64(i)/10)
	}
	path := writeLog(t, "many.jsonl", log.String())
	code, stdout, stderr := runAnalyzeCmd(t, path)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	_, runs, _ := strings.Cut(stdout, "\nruns: ")
	lines := strings.Split(strings.TrimSuffix(runs, "\n"), "\n")
	if len(lines) != 23 || lines[0] != "25; 14 passed their cap, 0 had calls refused by a cap" ||
		!strings.HasPrefix(lines[2], "run-24 ") || !strings.HasPrefix(lines[21], "run-05 ") ||
		lines[22] != "and 5 more runs: --json lists them all" {
		t.Errorf("runs\n%s", runs)
	}
	code, stdout, _ = runAnalyzeCmd(t, "--json", path)
	var r analyze.Report
	if err := json.Unmarshal([]byte(stdout), &r); code != 0 || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if len(r.Runs) != 25 || r.Runs[0].Name != "run-24" || r.Runs[24].Name != "run-00" || r.Tenants != nil {
		t.Errorf("runs %+v, tenants %+v", r.Runs, r.Tenants)
	}
}

// TestAnalyzeCapsJSON checks that --json adds runs and tenants to the
// keys it had, and that a malformed cap is reported like any malformed
// line.
func TestAnalyzeCapsJSON(t *testing.T) {
	path := writeLog(t, "caps.jsonl", analyzeCapsLog+`{"succeeded":true,"run":"r-9","run_cap_usd":-1}`+"\n"+
		`{"succeeded":true,"tenant":7}`+"\n")
	code, stdout, stderr := runAnalyzeCmd(t, "--json", "--tenant-cap", "0.05", path)
	if code != 0 || stderr != "rebound analyze: "+path+": 2 of 8 lines malformed (line 7, 8)\n" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	raw := oneJSONObject(t, stdout)
	if keys := sortedKeys(raw); !slices.Equal(keys, []string{"calls", "files", "lines", "malformed", "rows", "runs", "skipped", "tenants", "totals"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	var r analyze.Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Runs) != 3 || r.Runs[0].Name != "r-1" || r.Runs[0].Refused != 1 {
		t.Errorf("runs %+v", r.Runs)
	}
	// globex logs no cap: --tenant-cap's is its, and it passed it.
	if g := r.Tenants[0]; g.Name != "globex" || g.CapUSD == nil || *g.CapUSD != 0.05 || !g.PassedCap {
		t.Errorf("tenants %+v", r.Tenants)
	}
}

// TestAnalyzeCapsHelp checks that --help says how to log caps and what
// the flags do.
func TestAnalyzeCapsHelp(t *testing.T) {
	code, stdout, stderr := runAnalyzeCmd(t, "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{`"run", "tenant"`, `"run_cap_usd"`, `"tenant_cap_usd"`, `"reason":"refused by the guard"`,
		"-run-cap dollars", "-tenant-cap dollars", "[--run-cap USD] [--tenant-cap USD]",
		fmt.Sprintf("At most %d runs", analyze.DefaultMaxKeys)} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in --help", want)
		}
	}
}

// TestAnalyzeCachedShareAndSavings: on rebound proxy's access lines, the
// table and --json say how much of the input was read from the cache and
// what the cache saved at the prices given; the spend is the lines'
// cost_usd.
func TestAnalyzeCachedShareAndSavings(t *testing.T) {
	path := writeLog(t, "proxy.jsonl", `{"msg":"request","status":200,"attempts":1,"input_tokens":92010,"output_tokens":200,"cache_read_tokens":90000,"cache_write_tokens":2000,"tenant":"acme","cost_usd":0.038655}
{"msg":"request","status":200,"attempts":1,"input_tokens":92010,"output_tokens":200,"cache_read_tokens":90000,"tenant":"acme","cost_usd":0.03603}
`)
	prices := []string{"--price-in", "3", "--price-out", "15", "--price-cache-read", "0.3", "--price-cache-write", "3.75"}
	code, stdout, stderr := runAnalyzeCmd(t, append(prices, path)...)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// Saved: 180 000 reads at $2.70 a million less, 2 000 writes at $0.75 more.
	for _, want := range []string{
		"cost $0.0747, wasted $0 (0.0%), $0.0373 per successful call",
		"input 184020 tokens: 97.8% read from the cache, 1.1% written into it; the cache saved $0.4845",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("no %q in\n%s", want, stdout)
		}
	}
	code, stdout, stderr = runAnalyzeCmd(t, append(prices, "--json", path)...)
	var r analyze.Report
	if err := json.Unmarshal([]byte(stdout), &r); code != 0 || err != nil {
		t.Fatalf("exit %d %v: %s", code, err, stderr)
	}
	tot := r.Totals
	if tot.InputTokens != 184020 || tot.CacheReadTokens != 180000 || tot.CacheWriteTokens != 2000 ||
		tot.CacheReadShare == nil || *tot.CacheReadShare != 0.978155 || tot.CacheSavedUSD == nil || *tot.CacheSavedUSD != 0.4845 ||
		tot.CostUSD == nil || *tot.CostUSD != 0.074685 {
		t.Errorf("totals %+v", tot)
	}
	// Writes dearer than the reads save: the cache cost more.
	_, stdout, _ = runAnalyzeCmd(t, "--price-in", "3", "--price-cache-write", "1000", path)
	if !strings.Contains(stdout, "the cache cost $1.99 more than input read afresh") {
		t.Errorf("writes at $1000 a million:\n%s", stdout)
	}
}
