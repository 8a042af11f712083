package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/sim"
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
	dec := json.NewDecoder(strings.NewReader(stdout))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Fatal("stdout holds more than one JSON object")
	}
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
	} {
		code, stdout, stderr := runSimCmd(t, tc.args...)
		if code != 2 || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, tc.want) ||
			!strings.HasPrefix(stderr, "rebound sim: ") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line naming %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
	if code, _, stderr := runSimCmd(t, "-h"); code != 0 || !strings.Contains(stderr, "--cells is another name") {
		t.Errorf("-h: exit %d, %q", code, stderr)
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
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"sim", "--json"}, &out, &errOut); code != 1 || out.Len() != 0 {
		t.Errorf("canceled: exit %d, stdout %q", code, out.String())
	}
}
