package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/sim"
	"github.com/rebound-go/rebound/ratelimit"
)

func runSimCmd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), append([]string{"sim"}, args...), &out, &errOut)
	return code, out.String(), errOut.String()
}

// TestSimJSON checks that --json prints exactly one object with the
// documented keys, and that its figures are sane and reproducible.
func TestSimJSON(t *testing.T) {
	args := []string{"--json", "--scenario", "occ", "--clients", "10,50", "--trials", "5", "--seed", "9"}
	code, stdout, stderr := runSimCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "[10/10]") {
		t.Errorf("no progress on stderr: %q", stderr)
	}
	raw := oneJSONObject(t, stdout)
	if keys := sortedKeys(raw); !slices.Equal(keys, []string{"results", "scenario", "seed", "trials"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	var results []map[string]json.RawMessage
	if err := json.Unmarshal(raw["results"], &results); err != nil || len(results) != 10 {
		t.Fatalf("results: %v, %d of them", err, len(results))
	}
	for _, res := range results {
		if keys := sortedKeys(res); !slices.Equal(keys, []string{"clients", "completion_ms", "strategy", "succeeded", "writes"}) {
			t.Fatalf("result keys %v", keys)
		}
	}
	var r sim.OCCReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Scenario != "occ" || r.Seed != 9 || r.Trials != 5 {
		t.Errorf("header %q, seed %d, trials %d", r.Scenario, r.Seed, r.Trials)
	}
	for _, res := range r.Results {
		if res.Succeeded != float64(res.Clients) || res.Writes < float64(res.Clients) || res.CompletionMS <= 0 {
			t.Errorf("implausible result %+v", res)
		}
	}
	if code, again, _ := runSimCmd(t, args...); code != 0 || again != stdout {
		t.Errorf("same seed, different output (exit %d)", code)
	}
	// --cells is another name for --clients.
	cellsArgs := slices.Clone(args)
	cellsArgs[3] = "--cells"
	if code, cells, _ := runSimCmd(t, cellsArgs...); code != 0 || cells != stdout {
		t.Errorf("--cells differs from --clients (exit %d)", code)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestSimTable checks the human table: ours beside the published figure.
func TestSimTable(t *testing.T) {
	code, stdout, stderr := runSimCmd(t, "--clients", "100,7", "--trials", "3", "--strategies", "full, none")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 7 {
		t.Fatalf("want a title, a blank line, a header and 4 rows:\n%s", stdout)
	}
	for _, want := range []string{"full", "796", "5.00 s", "none", "2430", "2.04 s", "100/100", "7/7", "—", "%"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stdout, "decorrelated") {
		t.Errorf("--strategies did not narrow the table:\n%s", stdout)
	}
}

// TestSimBadUsage wants exit 2 and one line on stderr for each mistake.
func TestSimBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--scenario", "weather"}, "occ"},
		{[]string{"--clients", "ten"}, "ten"},
		{[]string{"--clients", "10,0"}, "positive"},
		{[]string{"--cells", "10", "--clients", "20"}, "--cells"},
		{[]string{"--trials", "0"}, "trials"},
		{[]string{"--strategies", "full,fancy"}, "fancy"},
		{[]string{"--strategies", "full,"}, "empty"},
		{[]string{"--nope"}, "nope"},
		{[]string{"occ"}, "unexpected argument"},
		{[]string{"--attempts", "3"}, "--attempts does not apply to the occ scenario"},
		{[]string{"--scenario", "iid", "--clients", "10"}, "--clients does not apply to the iid scenario"},
		{[]string{"--scenario", "iid", "--strategies", "full"}, "--strategies does not apply"},
		{[]string{"--scenario", "iid", "--cells", "0.1,x"}, `"x" is not a number`},
		{[]string{"--scenario", "iid", "--cells", "0.1,1.5"}, "within [0, 1]"},
		{[]string{"--scenario", "iid", "--attempts", "3,0"}, "at least 1"},
		{[]string{"--scenario", "iid", "--attempts", "three"}, "three"},
		{[]string{"--scenario", "iid", "--trials", "0"}, "trials"},
		// Flags of another scenario: refused, saying whose they are.
		{[]string{"--attempts", "3"}, "it belongs to --scenario iid"},
		{[]string{"--scenario", "overload", "--attempts", "3"}, "--attempts does not apply to the overload scenario: it belongs to --scenario iid"},
		{[]string{"--scenario", "overload", "--clients", "10"}, "--clients does not apply to the overload scenario: it belongs to --scenario occ"},
		{[]string{"--scenario", "overload", "--trials", "1"}, "--trials does not apply to the overload scenario: it belongs to --scenario occ or iid"},
		{[]string{"--scenario", "iid", "--strategies", "none"}, "--strategies does not apply to the iid scenario: it belongs to --scenario occ or overload"},
		// NaN, infinities, negative and absurd values.
		{[]string{"--scenario", "iid", "--cells", "NaN"}, "--cells NaN: want failure probabilities within [0, 1]"},
		{[]string{"--scenario", "iid", "--cells", "0.1,Inf"}, "--cells +Inf: want"},
		{[]string{"--scenario", "iid", "--cells", "-0.5"}, "--cells -0.5: want"},
		{[]string{"--scenario", "iid", "--attempts", "1000000000"}, "--attempts 1000000000: want at least 1 and at most 100"},
		{[]string{"--scenario", "iid", "--trials", "100000000000"}, "--trials 100000000000: want a whole number from 1 to 10000000"},
		{[]string{"--trials", "-1"}, "--trials -1: want"},
		{[]string{"--trials", "1000000"}, "--trials 1000000: want a whole number from 1 to 10000 for the occ scenario"},
		{[]string{"--clients", "10,2147483648"}, "--clients 2147483648: want"},
		{[]string{"--cells", "-4"}, "--cells -4: want"},
		{[]string{"--scenario", "overload", "--cells", "NaNx5"}, "--cells NaNx5: want a fraction in (0, 1] x seconds"},
		{[]string{"--scenario", "overload", "--cells", "0.5xNaN"}, "--cells 0.5xNaN: want"},
		{[]string{"--scenario", "overload", "--cells", "Infx5"}, "--cells Infx5: want"},
		{[]string{"--scenario", "overload", "--cells", "0.5xInf"}, "--cells 0.5xInf: want"},
		{[]string{"--scenario", "overload", "--cells", "0.5x-5"}, "--cells 0.5x-5: want"},
		{[]string{"--scenario", "overload", "--cells", "0.5x1e12"}, "--cells 0.5x1e12: want"},
		{[]string{"--scenario", "overload", "--cells", "0.5x3601"}, "up to 3600"},
		{[]string{"--scenario", "overload", "--cells", "0.5x1e-12"}, "--cells 0.5x1e-12: want"},
		{[]string{"--scenario", "overload", "--strategies", "none,panic"}, "panic"},
		{[]string{"--scenario", "priority", "--strategies", "lifo"}, `unknown priority strategy "lifo"`},
		{[]string{"--scenario", "priority", "--cells", "0"}, "--cells 0: want MaxPassOver values from 1 to"},
		{[]string{"--scenario", "priority", "--cells", "8,x"}, `"x" is not a whole number`},
		{[]string{"--scenario", "priority", "--cells", "99999999999"}, "--cells 99999999999: want"},
		{[]string{"--scenario", "priority", "--trials", "2"}, "--trials does not apply to the priority scenario"},
		{[]string{"--scenario", "priority", "--clients", "8"}, "--clients does not apply to the priority scenario"},
	} {
		code, stdout, stderr := runSimCmd(t, tc.args...)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) ||
			!strings.HasPrefix(stderr, "rebound sim: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line naming %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	if code, help, _ := runSimCmd(t, "-h"); code != 0 || !strings.Contains(help, "--cells is another name") ||
		!strings.Contains(help, "--scenario iid") || !strings.Contains(help, "2015 for occ, 1 for iid") {
		t.Errorf("-h: exit %d, %q", code, help)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"simulate"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "sim") {
		t.Errorf("unknown command: exit %d, %q", code, errOut.String())
	}
	out.Reset()
	if run(context.Background(), []string{"help"}, &out, &errOut); !strings.Contains(out.String(), "  sim ") {
		t.Errorf("usage does not mention sim:\n%s", out.String())
	}
}

func TestSimCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, scenario := range []string{"occ", "iid", "overload", "priority"} {
		var out, errOut bytes.Buffer
		if code := run(ctx, []string{"sim", "--json", "--scenario", scenario}, &out, &errOut); code != 1 || out.Len() != 0 {
			t.Errorf("%s canceled: exit %d, stdout %q", scenario, code, out.String())
		}
	}
}

// TestSimIIDJSON checks the iid scenario's JSON: exactly one object with
// the documented keys, theory beside every measurement, the defaults of
// --seed and --cells, and the same output for the same seed.
func TestSimIIDJSON(t *testing.T) {
	args := []string{"--scenario", "iid", "--json", "--trials", "2000", "--attempts", "1,3"}
	code, stdout, stderr := runSimCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "[22/22]") || !strings.Contains(stderr, "seed 1,") {
		t.Errorf("no progress, or not the default seed, on stderr: %q", stderr)
	}
	raw := oneJSONObject(t, stdout)
	if keys := sortedKeys(raw); !slices.Equal(keys, []string{"results", "scenario", "seed"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	var results []map[string]json.RawMessage
	if err := json.Unmarshal(raw["results"], &results); err != nil || len(results) != 2*len(sim.DefaultIIDRates()) {
		t.Fatalf("results: %v, %d of them", err, len(results))
	}
	for _, res := range results {
		if keys := sortedKeys(res); !slices.Equal(keys, []string{"load", "load_bound", "max_attempts", "p", "success", "success_bound"}) {
			t.Fatalf("result keys %v", keys)
		}
	}
	var r sim.IIDReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	if r.Scenario != "iid" || r.Seed != 1 {
		t.Errorf("header %q, seed %d", r.Scenario, r.Seed)
	}
	for i, res := range r.Results {
		if p := sim.DefaultIIDRates()[i%len(sim.DefaultIIDRates())]; res.P != p {
			t.Errorf("result %d at p = %v, want %v", i, res.P, p)
		}
		success, load := sim.IIDTheory(res.P, res.MaxAttempts)
		if res.SuccessBound != success || res.LoadBound != load || res.Success < 0 || res.Success > 1 ||
			res.Load < 1 || res.Load > float64(res.MaxAttempts) {
			t.Errorf("implausible result %+v", res)
		}
	}
	if code, again, _ := runSimCmd(t, args...); code != 0 || again != stdout {
		t.Errorf("same seed, different output (exit %d)", code)
	}
	if code, other, _ := runSimCmd(t, append(args, "--seed", "2")...); code != 0 || other == stdout || !strings.Contains(other, `"seed": 2`) {
		t.Errorf("--seed 2 gave the same output as seed 1 (exit %d)", code)
	}
}

// TestSimIIDTable checks the iid table: the measured figures beside
// theory's, narrowed by --cells.
func TestSimIIDTable(t *testing.T) {
	code, stdout, stderr := runSimCmd(t, "--scenario", "iid", "--cells", "0.35, 1", "--attempts", "4", "--trials", "1000")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("want a title, a blank line, a header and 2 rows:\n%s", stdout)
	}
	for _, want := range []string{"attempts", "theory", "0.35", "0.9850", "1.5154"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, stdout)
		}
	}
	// At p = 1 every call fails after exactly 4 attempts.
	if f := strings.Fields(lines[4]); !slices.Equal(f, []string{"4", "1", "0.0000", "0.0000", "4.0000", "4.0000"}) {
		t.Errorf("row at p = 1: %q", f)
	}
}

// TestSimHTML checks that --html writes a page of charts beside the usual
// output, for every scenario that draws them, and that a page that cannot
// be written fails the command.
func TestSimHTML(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args   []string
		charts int
		want   []string
	}{
		{[]string{"--clients", "10,50", "--trials", "2", "--strategies", "full,none"}, 2,
			[]string{"Writes against clients", "published (Brooker)", "full", "none"}},
		{[]string{"--scenario", "iid", "--cells", "0,0.5", "--trials", "100"}, 2,
			[]string{"Success rate", "attempts per call", "6 attempts", "theory"}},
	} {
		path := filepath.Join(dir, strings.Join(tc.args[:2], "")+".html")
		for _, json := range []bool{false, true} {
			args := append(slices.Clone(tc.args), "--html", path)
			if json {
				args = append(args, "--json")
			}
			code, stdout, stderr := runSimCmd(t, args...)
			if code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, stderr)
			}
			if !strings.Contains(stderr, "wrote "+path) {
				t.Errorf("%v: stderr does not name the page: %q", args, stderr)
			}
			if json != strings.HasPrefix(stdout, "{") || !json && !strings.Contains(stdout, "theory") && !strings.Contains(stdout, "published") {
				t.Errorf("%v: --html changed the usual output:\n%s", args, stdout)
			}
			page, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			html := string(page)
			if !strings.HasPrefix(html, "<!DOCTYPE html>") || strings.Count(html, "<svg ") != tc.charts || strings.Contains(html, "<script") {
				t.Errorf("%v: page with %d <svg>:\n%.300s", args, strings.Count(html, "<svg "), html)
			}
			if err := xml.Unmarshal(page, new(struct{})); err != nil {
				t.Errorf("%v: page is not well-formed: %v", args, err)
			}
			for _, want := range tc.want {
				if !strings.Contains(html, want) {
					t.Errorf("%v: page lacks %q", args, want)
				}
			}
			if n := strings.Count(html, "http"); n != tc.charts || strings.Count(html, `xmlns="http://www.w3.org/2000/svg"`) != tc.charts {
				t.Errorf("%v: page holds %d \"http\", want only the %d SVG namespaces", args, n, tc.charts)
			}
		}
	}
}

// TestSimHTMLCheckedFirst wants a page that cannot be written to fail the
// command before anything is simulated, with one line; and a run that
// fails to leave no page it created, and an existing page as it was.
func TestSimHTMLCheckedFirst(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "no", "such", "dir.html"), dir} {
		for _, scenario := range []string{"occ", "iid", "overload", "priority"} {
			code, stdout, stderr := runSimCmd(t, "--scenario", scenario, "--html", path)
			if code != 1 || stdout != "" || !strings.HasPrefix(stderr, "rebound sim: --html: ") || strings.Count(stderr, "\n") != 1 {
				t.Errorf("%s, unwritable page %s: exit %d, stdout %q, stderr %q", scenario, path, code, stdout, stderr)
			}
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	page := filepath.Join(dir, "new.html")
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"sim", "--html", page}, &out, &errOut); code != 1 {
		t.Fatalf("canceled: exit %d, %q", code, errOut.String())
	}
	if _, err := os.Stat(page); !os.IsNotExist(err) {
		t.Errorf("a canceled run left a page behind: %v", err)
	}
	old := filepath.Join(dir, "old.html")
	if err := os.WriteFile(old, []byte("the last page"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := run(ctx, []string{"sim", "--html", old}, &out, &errOut); code != 1 {
		t.Fatalf("canceled: exit %d, %q", code, errOut.String())
	}
	if b, err := os.ReadFile(old); err != nil || string(b) != "the last page" {
		t.Errorf("a canceled run changed the last page: %q, %v", b, err)
	}
	if code, _, stderr := runSimCmd(t, "--clients", "10", "--trials", "1", "--html", old); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if b, err := os.ReadFile(old); err != nil || !strings.HasPrefix(string(b), "<!DOCTYPE html>") || strings.Contains(string(b), "the last page") {
		t.Errorf("the page was not replaced: %.100q, %v", b, err)
	}
}

// TestSimOverloadProgress wants a line on stderr for each strategy in
// each cell as it finishes, and, with a long cell, lines while it runs.
func TestSimOverloadProgress(t *testing.T) {
	defer func(d time.Duration) { sim.ProgressEvery = d }(sim.ProgressEvery)
	sim.ProgressEvery = 0 // every report a line
	code, _, stderr := runSimCmd(t, "--scenario", "overload", "--cells", "0.5x5,0.5x10", "--strategies", "none,rebound")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"rebound sim: overload scenario, seed 1, 2 strategies in 2 cells…\n",
		"rebound sim: [1/4] f=0.5 Δt=5s none: goodput ",
		"rebound sim: [4/4] f=0.5 Δt=10s rebound: goodput ",
		"rebound sim: [3/4] f=0.5 Δt=10s none: 120 s of 140 s simulated\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestSimOverload(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"sim", "--scenario", "overload", "--json", "--cells", "0.5x5", "--strategies", "none,rebound"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r struct {
		Scenario string `json:"scenario"`
		Seed     uint64 `json:"seed"`
		Results  []struct {
			Strategy        string  `json:"strategy"`
			TriggerFraction float64 `json:"trigger_fraction"`
			TriggerS        float64 `json:"trigger_s"`
			Goodput         float64 `json:"goodput"`
			Amplification   float64 `json:"amplification"`
			SuccessRate     float64 `json:"success_rate"`
			Recovered       bool    `json:"recovered"`
			RecoveryS       float64 `json:"recovery_s"`
		} `json:"results"`
	}
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&r); err != nil || dec.More() {
		t.Fatalf("stdout is not one JSON object: %v", err)
	}
	if r.Scenario != "overload" || r.Seed != 1 || len(r.Results) != 2 || r.Results[1].Strategy != "rebound" || !r.Results[1].Recovered ||
		r.Results[0].TriggerFraction != 0.5 || r.Results[0].TriggerS != 5 {
		t.Fatalf("%+v", r)
	}
	for _, args := range [][]string{
		{"sim", "--scenario", "overload", "--cells", "2x5"},
		{"sim", "--scenario", "overload", "--cells", "0.5"},
		{"sim", "--scenario", "overload", "--strategies", "panic"},
		{"sim", "--scenario", "overload", "--trials", "3"},
	} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), args, &out, &errOut); code != 2 || strings.Count(strings.TrimSpace(errOut.String()), "\n") != 0 {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}

// TestSimPriority runs the priority scenario's default: one JSON object
// with the documented keys, the default seed, interactive p99 with
// priorities within 1.5x of its value without the batch and the batch
// done, first in, first out at least 3x worse; the same figures again for
// the same seed. The help names the limit's default MaxPassOver.
func TestSimPriority(t *testing.T) {
	code, stdout, stderr := runSimCmd(t, "--scenario", "priority", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "seed 1,") || !strings.Contains(stderr, "[3/3] priority (max pass-over 8)") {
		t.Errorf("stderr: %q", stderr)
	}
	raw := oneJSONObject(t, stdout)
	if keys := sortedKeys(raw); !slices.Equal(keys, []string{"results", "scenario", "seed"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	var results []map[string]json.RawMessage
	if err := json.Unmarshal(raw["results"], &results); err != nil || len(results) != 3 {
		t.Fatalf("results: %v, %d of them", err, len(results))
	}
	if keys := sortedKeys(results[0]); !slices.Equal(keys, []string{"batch_completed", "batch_done", "batch_s", "interactive_calls",
		"interactive_p50_ms", "interactive_p99_by_window_ms", "interactive_p99_ms", "max_pass_over", "strategy"}) {
		t.Fatalf("result keys %v", keys)
	}
	var r sim.PriorityReport
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	calm, fifo, prio := r.Results[0], r.Results[1], r.Results[2]
	t.Logf("seed %d: p99 %v ms alone, %v ms fifo, %v ms with priorities; batch %v s fifo, %v s with priorities",
		r.Seed, calm.InteractiveP99MS, fifo.InteractiveP99MS, prio.InteractiveP99MS, fifo.BatchS, prio.BatchS)
	if r.Seed != 1 || calm.Strategy != "noflood" || fifo.Strategy != "fifo" || prio.Strategy != "priority" ||
		prio.MaxPassOver != ratelimit.DefaultMaxPassOver {
		t.Fatalf("%+v", r)
	}
	if prio.InteractiveP99MS > 1.5*calm.InteractiveP99MS || !prio.BatchDone {
		t.Errorf("priority: p99 %v ms against %v ms alone, batch done %v", prio.InteractiveP99MS, calm.InteractiveP99MS, prio.BatchDone)
	}
	if fifo.InteractiveP99MS < 3*calm.InteractiveP99MS {
		t.Errorf("fifo: p99 %v ms against %v ms alone: no starvation", fifo.InteractiveP99MS, calm.InteractiveP99MS)
	}
	if code, again, _ := runSimCmd(t, "--scenario", "priority", "--json"); code != 0 || again != stdout {
		t.Errorf("same seed, different output (exit %d)", code)
	}
	code, table, _ := runSimCmd(t, "--scenario", "priority", "--strategies", "fifo,priority", "--cells", "2,8")
	if code != 0 || !strings.Contains(table, "priority (max pass-over 2)") || !strings.Contains(table, "3000/3000") ||
		strings.Contains(table, "noflood") {
		t.Errorf("table: exit %d\n%s", code, table)
	}
	if code, help, _ := runSimCmd(t, "-h"); code != 0 || !strings.Contains(help, "--scenario priority") ||
		!strings.Contains(help, fmt.Sprintf("(default %d, the limit's default", ratelimit.DefaultMaxPassOver)) {
		t.Errorf("-h: exit %d, %q", code, help)
	}
}

// TestSimHedgeJSON checks the hedge scenario's JSON: exactly one object,
// the keys and the extras, "none" then "hedge", the default seed,
// and the same output for the same seed.
func TestSimHedgeJSON(t *testing.T) {
	args := []string{"--scenario", "hedge", "--json", "--trials", "3000"}
	code, stdout, stderr := runSimCmd(t, args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stderr, "hedge scenario, seed 1, 3000 calls") || !strings.Contains(stderr, "rebound sim: hedge: p50 ") {
		t.Errorf("no progress, or not the default seed, on stderr: %q", stderr)
	}
	raw := oneJSONObject(t, stdout)
	if keys := sortedKeys(raw); !slices.Equal(keys, []string{"calls", "results", "scenario", "seed"}) {
		t.Fatalf("top-level keys %v", keys)
	}
	var results []map[string]any
	if err := json.Unmarshal(raw["results"], &results); err != nil || len(results) != 2 {
		t.Fatalf("results: %v, %d of them", err, len(results))
	}
	want := []string{"extra_spend", "extra_spend_theory", "hedged", "mean_ms", "p50_ms", "p50_theory_ms", "p99_ms",
		"p99_theory_ms", "refused", "strategy"}
	for i, res := range results {
		if keys := sortedKeys(res); !slices.Equal(keys, want) {
			t.Fatalf("result keys %v", keys)
		}
		if res["strategy"] != []string{"none", "hedge"}[i] {
			t.Errorf("result %d is %v", i, res["strategy"])
		}
	}
	none, hedge := results[0], results[1]
	if none["extra_spend"] != 0.0 || hedge["extra_spend"].(float64) <= 0 || hedge["p99_ms"].(float64) >= none["p99_ms"].(float64) {
		t.Errorf("implausible results %v", results)
	}
	if string(raw["seed"]) != "1" || string(raw["calls"]) != "3000" {
		t.Errorf("seed %s, calls %s", raw["seed"], raw["calls"])
	}
	if code, again, _ := runSimCmd(t, args...); code != 0 || again != stdout {
		t.Errorf("same seed, different output (exit %d)", code)
	}
	if code, other, _ := runSimCmd(t, append(args, "--seed", "2")...); code != 0 || other == stdout || !strings.Contains(other, `"seed": 2`) {
		t.Errorf("--seed 2 gave the same output as seed 1 (exit %d)", code)
	}
}

// TestSimHedgeTable checks the table: a row per strategy beside theory,
// and the ratio of the p99s.
func TestSimHedgeTable(t *testing.T) {
	code, stdout, stderr := runSimCmd(t, "--scenario", "hedge", "--trials", "3000", "--seed", "5")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 7 || !strings.HasPrefix(lines[0], "rebound sim --scenario hedge, seed 5, 3000 calls") ||
		!strings.HasPrefix(strings.TrimSpace(lines[3]), "none ") || !strings.HasPrefix(strings.TrimSpace(lines[4]), "hedge ") ||
		!strings.HasPrefix(lines[6], "p99 ") || !strings.Contains(lines[6], "times lower with a hedge (theory 4.2)") {
		t.Fatalf("want a title, a header, 2 rows and the p99s' ratio:\n%s", stdout)
	}
}

// TestSimHedgeUsage wants flags the scenario does not take refused with
// one line, and --html to draw its chart.
func TestSimHedgeUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cells", "1"}, "--cells does not apply to the hedge scenario"},
		{[]string{"--clients", "10"}, "--clients does not apply to the hedge scenario"},
		{[]string{"--attempts", "3"}, "--attempts does not apply to the hedge scenario"},
		{[]string{"--strategies", "none"}, "--strategies does not apply to the hedge scenario"},
		{[]string{"--trials", "0"}, "--trials 0: want a whole number from 1 to 10000000 for the hedge scenario"},
		{[]string{"--trials", "10000001"}, "--trials 10000001: want"},
	} {
		code, stdout, stderr := runSimCmd(t, append([]string{"--scenario", "hedge"}, tc.args...)...)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line naming %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	if code, help, _ := runSimCmd(t, "-h"); code != 0 || !strings.Contains(help, "--scenario hedge") || !strings.Contains(help, "1 for hedge") {
		t.Errorf("-h: exit %d, %q", code, help)
	}

	page := filepath.Join(t.TempDir(), "hedge.html")
	if code, _, stderr := runSimCmd(t, "--scenario", "hedge", "--trials", "2000", "--html", page); code != 0 {
		t.Fatalf("--html: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(page)
	if html := string(b); err != nil || strings.Count(html, "<svg ") != 1 || !strings.Contains(html, "share of calls slower") {
		t.Errorf("page: %v\n%.300s", err, html)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"sim", "--json", "--scenario", "hedge"}, &out, &errOut); code != 1 || out.Len() != 0 {
		t.Errorf("canceled: exit %d, stdout %q", code, out.String())
	}
}
