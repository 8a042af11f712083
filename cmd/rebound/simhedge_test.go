package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

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
