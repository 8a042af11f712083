package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// setenv sets the environment variable name to value until t ends, as
// t.Setenv does, in a test that runs in parallel with others, which
// t.Setenv refuses: the environment is the process's, so name must be
// t's alone (named for the test, or made for the run). One already set
// fails the test.
func setenv(t testing.TB, name, value string) {
	t.Helper()
	if _, ok := os.LookupEnv(name); ok {
		t.Fatalf("%s is set already: a variable of a test that runs in parallel must be its own", name)
	}
	os.Setenv(name, value)
	t.Cleanup(func() { os.Unsetenv(name) })
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// oneJSONObject decodes stdout, which --json makes exactly one JSON object,
// and returns its fields.
func oneJSONObject(t *testing.T, stdout string) map[string]json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(stdout))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		t.Fatalf("stdout is not a JSON object: %v\n%s", err, stdout)
	}
	if dec.More() {
		t.Fatal("stdout holds more than one JSON object")
	}
	return raw
}

// TestHelp checks that help asked for, in any of its forms, goes to stdout
// with exit 0, and that "rebound help COMMAND" is that command's help.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"-h"}, {"-help"}, {"--help"}} {
		code, stdout, stderr := runCmd(args...)
		if code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: rebound <command>") ||
			!strings.Contains(stdout, "  version ") || !strings.Contains(stdout, "  help ") {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want 0 and the usage on stdout", args, code, stderr, stdout)
		}
	}
	for _, cmd := range []string{"analyze", "bench", "chaos", "sim"} {
		code, help, stderr := runCmd("help", cmd)
		if code != 0 || stderr != "" || !strings.HasPrefix(help, "usage: rebound "+cmd) || !strings.Contains(help, "\n  -") {
			t.Errorf("help %s: exit %d, stderr %q, stdout %q; want 0 and its usage with flags on stdout", cmd, code, stderr, help)
		}
		for _, h := range []string{"-h", "-help", "--help"} {
			code, stdout, stderr := runCmd(cmd, h)
			if code != 0 || stderr != "" || stdout != help {
				t.Errorf("%s %s: exit %d, stderr %q, stdout %q; want 0 and the help of %q on stdout", cmd, h, code, stderr, stdout, "help "+cmd)
			}
		}
		// Asked for after another flag, too.
		if code, stdout, _ := runCmd(cmd, "--seed", "3", "-h"); code != 0 || stdout != help {
			t.Errorf("%s --seed 3 -h: exit %d, stdout %q", cmd, code, stdout)
		}
	}
	if code, stdout, stderr := runCmd("help", "version"); code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: rebound version") {
		t.Errorf("help version: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
	for _, args := range [][]string{{"help", "help"}, {"help", "-h"}, {"-h", "--help"}} {
		if code, stdout, stderr := runCmd(args...); code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: rebound <command>") {
			t.Errorf("%q: exit %d, stderr %q, stdout %q", args, code, stderr, stdout)
		}
	}
	if code, stdout, _ := runCmd("-h", "chaos"); code != 0 || !strings.HasPrefix(stdout, "usage: rebound chaos") {
		t.Errorf("-h chaos: exit %d, stdout %q", code, stdout)
	}
}

// TestUsageErrors checks that bad usage goes to stderr, in one line, with
// exit 2 and nothing on stdout.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "benchmark"}, `rebound help: unknown command "benchmark" (want analyze, batch, bench, chaos, mcp, proxy, sim, help or version)`},
		{[]string{"help", "bench", "sim"}, `rebound help: unexpected argument "sim"`},
		{[]string{"frobnicate"}, `rebound: unknown command "frobnicate" (want analyze, batch, bench, chaos, mcp, proxy, sim, help or version)`},
		{[]string{"version", "now"}, `rebound version: unexpected argument "now"`},
		{[]string{"version", "--short"}, `rebound version: flag provided but not defined: --short (rebound version --help lists the flags)`},
		{[]string{"chaos", "--nope"}, "rebound chaos: flag provided but not defined: --nope (rebound chaos --help lists the flags)"},
		{[]string{"analyze", "--nope"}, "rebound analyze: flag provided but not defined: --nope (rebound analyze --help lists the flags)"},
		{[]string{"bench", "--nope"}, "rebound bench: flag provided but not defined: --nope (rebound bench --help lists the flags)"},
		{[]string{"sim", "--nope"}, "rebound sim: flag provided but not defined: --nope (rebound sim --help lists the flags)"},
		{[]string{"mcp", "--nope"}, "rebound mcp: flag provided but not defined: --nope (rebound mcp --help lists the flags)"},
		// A newcomer's guess at a flag is told the one to give.
		{[]string{"proxy", "--port", "9000"}, "rebound proxy: flag provided but not defined: --port (the address is --addr host:port)"},
		{[]string{"proxy", "--upstreams", "http://127.0.0.1:1"}, "rebound proxy: flag provided but not defined: --upstreams (did you mean --upstream?)"},
	} {
		code, stdout, stderr := runCmd(c.args...)
		if code != 2 || stdout != "" || stderr != c.want+"\n" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and %q", c.args, code, stdout, stderr, c.want)
		}
	}
	// With no command at all, the usage is the reason, on stderr.
	if code, stdout, stderr := runCmd(); code != 2 || stdout != "" || !strings.HasPrefix(stderr, "usage: rebound <command>") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
}

func TestVersion(t *testing.T) {
	code, want, stderr := runCmd("version")
	if code != 0 || stderr != "" || !strings.HasPrefix(want, "rebound ") || strings.Count(want, "\n") != 1 {
		t.Fatalf("version: exit %d, stderr %q, stdout %q; want 0 and one line", code, stderr, want)
	}
	for _, args := range [][]string{{"--version"}, {"-version"}} {
		if code, stdout, stderr := runCmd(args...); code != 0 || stderr != "" || stdout != want {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want 0 and %q", args, code, stderr, stdout, want)
		}
	}
	if code, stdout, stderr := runCmd("version", "-h"); code != 0 || stderr != "" || !strings.HasPrefix(stdout, "usage: rebound version") {
		t.Errorf("version -h: exit %d, stderr %q, stdout %q", code, stderr, stdout)
	}
}
