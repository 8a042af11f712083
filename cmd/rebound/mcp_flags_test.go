package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMCPBadFlags: every misuse is one line on stderr, nothing on
// stdout (which would be the protocol), and exit 2; nothing is started.
func TestMCPBadFlags(t *testing.T) {
	dir := t.TempDir()
	badConfig := filepath.Join(dir, "bad.json")
	os.WriteFile(badConfig, []byte(`{"tools": {"search": "read-only", "create_entities": "sideeffects"}}`), 0o600)
	t.Setenv("REBOUND_TEST_EMPTY", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "give the server"},
		{[]string{"--name", "x"}, "give the server"},
		{[]string{"npx", "-y", "server"}, `unexpected argument "npx": put the server's command after --`},
		{[]string{"--"}, "-- without a command"},
		{[]string{"--upstream", "http://127.0.0.1:1/mcp", "--", "true"}, "--upstream and a command both given"},
		{[]string{"--upstream", "ftp://host/mcp"}, "--upstream"},
		{[]string{"--upstream", "127.0.0.1:3001"}, "--upstream"},
		{[]string{"--bogus", "--", "true"}, "flag provided but not defined: --bogus"},
		{[]string{"--down-wait", "soon", "--", "true"}, `invalid value "soon" for flag -down-wait`},
		{[]string{"--down-wait", "-1s", "--", "true"}, "--down-wait -1s is negative"},
		{[]string{"--idle-timeout", "1ns", "--", "true"}, "--idle-timeout 1ns: want 0 (none) or at least 100ms"},
		{[]string{"--down-wait", "50ms", "--", "true"}, "--down-wait 50ms: want 0 (none) or at least 100ms"},
		{[]string{"--restart-min", "0", "--", "true"}, "--restart-min 0"},
		{[]string{"--restart-min", "3s", "--restart-max", "1s", "--", "true"}, "--restart-min 3s is over --restart-max 1s"},
		{[]string{"--crash-limit", "0", "--", "true"}, "--crash-limit 0"},
		{[]string{"--max-sessions", "-3", "--addr", "127.0.0.1:0", "--", "true"}, "--max-sessions -3"},
		{[]string{"--log", "loud", "--", "true"}, `--log "loud"`},
		{[]string{"--config", filepath.Join(dir, "none.json"), "--", "true"}, "--config"},
		{[]string{"--config", badConfig, "--", "true"}, `tools["create_entities"] is "sideeffects"`},
		{[]string{"--token-env", "X", "--", "true"}, "--token-env goes with --addr"},
		{[]string{"--max-sessions", "3", "--", "true"}, "--max-sessions goes with --addr"},
		{[]string{"--addr", "0.0.0.0:0", "--", "true"}, "not a loopback address: give client tokens"},
		{[]string{"--addr", "nowhere", "--", "true"}, `--addr "nowhere"`},
		{[]string{"--addr", "127.0.0.1:0", "--token-env", "REBOUND_TEST_EMPTY", "--", "true"}, "REBOUND_TEST_EMPTY is not set"},
		{[]string{"--addr", "127.0.0.1:0", "--allow-origin", "*", "--", "true"}, `allowed origin "*" without client tokens`},
		{[]string{"--", "rebound-no-such-server-command"}, `server command: exec: "rebound-no-such-server-command"`},
		{[]string{"--", filepath.Join(dir, "no-such-server")}, "server command: "},
		{[]string{"--", badConfig}, "server command: "}, // not executable
		{[]string{"--", dir}, "server command: "},
	} {
		var stdout, stderr bytes.Buffer
		code := run(t.Context(), append([]string{"mcp"}, c.args...), &stdout, &stderr)
		lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
		if code != 2 || stdout.Len() != 0 || len(lines) != 1 || !strings.HasPrefix(lines[0], "rebound mcp: ") || !strings.Contains(lines[0], c.want) {
			t.Errorf("rebound mcp %q: exit %d, stdout %q, stderr %q; want exit 2 and one line with %q", c.args, code, stdout.String(), stderr.String(), c.want)
		}
	}
}

// TestMCPHelp: "rebound help mcp" documents every flag, on stdout.
func TestMCPHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(t.Context(), []string{"help", "mcp"}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	for _, flag := range []string{"upstream", "addr", "name", "down-wait", "idle-timeout", "restart-min", "restart-max",
		"healthy-after", "crash-limit", "crash-window", "crash-cooldown", "trust-annotations", "config", "log",
		"token-env", "tokens-file", "allow-host", "allow-origin", "max-sessions", "session-timeout", "drain-timeout"} {
		if !strings.Contains(stdout.String(), "\n  -"+flag+" ") && !strings.Contains(stdout.String(), "\n  -"+flag+"\n") {
			t.Errorf("rebound help mcp does not document --%s", flag)
		}
	}
}
