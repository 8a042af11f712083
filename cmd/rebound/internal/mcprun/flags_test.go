package mcprun

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/tool"
)

// TestMCPConfigFile: the per-tool rules are read strictly: each rule's
// name, nothing unknown, nothing after the object; the first bad entry
// (in name order) is named, a JSON mistake by its line and column.
func TestMCPConfigFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		f := filepath.Join(dir, "c.json")
		os.WriteFile(f, []byte(s), 0o600)
		return f
	}
	rules, err := readToolRules(write(`{"tools": {"create_entities": "side-effects", "search": "read-only", "set": "idempotent"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]tool.Kind{"create_entities": tool.SideEffects, "search": tool.ReadOnly, "set": tool.Idempotent}
	if len(rules) != len(want) {
		t.Errorf("rules %v, want %v", rules, want)
	}
	for name, r := range want {
		if rules[name] != r {
			t.Errorf("rules[%s] = %v, want %v", name, rules[name], r)
		}
	}
	for _, c := range []struct{ file, want string }{
		{`{"tools": {"b": "Read-Only", "a": "read-only"}}`, `tools["b"] is "Read-Only"`},
		{`{"tools": {"a": true}}`, `tools["a"] is true`},
		{`{"tools": {"a": "read-only"}, "servers": {}}`, `unknown field "servers"`},
		{`{"tools": {"a": "read-only"}} {}`, "something after the object"},
		{`{}`, `no "tools" object`},
		{`[]`, "line 1, column 1: json: cannot unmarshal array"},
		{`{"tools": {"a": "read-only",}}`, "invalid character"},
		// A JSON mistake says its line and column, as the proxy's does.
		{"{\"tools\": {\n  \"a\": \"read-only\",\n}}", `line 3, column 1: invalid character '}' looking for beginning of object key string`},
		{`{"tools": {"create": "side-effects", "b": "read-only", "create": "read-only"}}`, `tools["create"] is given twice`},
	} {
		_, err := readToolRules(write(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", c.file, err, c.want)
		}
	}
}

// TestUpstreamRefusedWithoutQuotingIt: a bad --upstream is refused in
// one line that does not quote it: hosted servers take their keys in the
// URL's user, path or query, and the line reaches the agent's logs.
func TestUpstreamRefusedWithoutQuotingIt(t *testing.T) {
	for _, s := range []string{
		"ftp://tok_USER:PASSWORD@host/api/s/PATHSECRET/mcp?key=SECRET",
		"tok_USER:PASSWORD@host/api/s/PATHSECRET/mcp?key=SECRET",
		"http:///api/s/PATHSECRET/mcp?key=SECRET",
		"http://host/api/s/PATHSECRET%zz/mcp?key=SECRET",
	} {
		err := checkUpstream(s)
		if err == nil || !strings.Contains(err.Error(), "--upstream") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line about --upstream", s, err)
			continue
		}
		for _, secret := range []string{"tok_USER", "PASSWORD", "PATHSECRET", "SECRET"} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("%s: %v holds %s", s, err, secret)
			}
		}
	}
	if err := checkUpstream("https://tok_USER@host:8443/api/s/PATHSECRET/mcp?key=SECRET"); err != nil {
		t.Errorf("a good URL: %v", err)
	}
}

// TestWaitsUnder100msAreRefusedAndZeroMeansNone: --idle-timeout and
// --down-wait under 100 ms, but not 0, are refused in one line (a
// nanosecond's idle timeout failed every replay, and so every restart);
// 0 keeps its meaning, none (the library's negative), and 100 ms is taken.
func TestWaitsUnder100msAreRefusedAndZeroMeansNone(t *testing.T) {
	config := func(args ...string) (Config, error) {
		fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := DefineFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f.Config(fs, []string{"true"}, true)
	}
	for _, name := range []string{"idle-timeout", "down-wait"} {
		for _, v := range []string{"1ns", "99ms"} {
			_, err := config("--"+name, v)
			want := "--" + name + " " + v + ": want 0 (none) or at least 100ms"
			if err == nil || err.Error() != want {
				t.Errorf("--%s %s: %v; want %q", name, v, err, want)
			}
		}
	}
	c, err := config("--idle-timeout", "0", "--down-wait", "0")
	if err != nil || c.Options.IdleTimeout >= 0 || c.Options.DownWait >= 0 {
		t.Errorf("0: %v, idle %v, down-wait %v; want none (negative) for both", err, c.Options.IdleTimeout, c.Options.DownWait)
	}
	c, err = config("--idle-timeout", "100ms", "--down-wait", "100ms")
	if err != nil || c.Options.IdleTimeout != 100*time.Millisecond || c.Options.DownWait != 100*time.Millisecond {
		t.Errorf("100ms: %v, idle %v, down-wait %v", err, c.Options.IdleTimeout, c.Options.DownWait)
	}
}

// TestAdminTokenEnv: --admin-token-env goes with --addr, names a variable
// that is set and is not a client token, and is kept from the server's
// environment as the client tokens' is.
func TestAdminTokenEnv(t *testing.T) {
	t.Setenv("REBOUND_TEST_ADMIN", "adm-9f1c")
	t.Setenv("REBOUND_TEST_TOKENS", "client-1,adm-9f1c")
	t.Setenv("REBOUND_TEST_CLIENT", "client-1")
	config := func(args ...string) (Config, error) {
		fs := flag.NewFlagSet("mcp", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := DefineFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f.Config(fs, []string{"true"}, true)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--admin-token-env", "REBOUND_TEST_ADMIN"}, "--admin-token-env goes with --addr"},
		{[]string{"--addr", "127.0.0.1:0", "--admin-token-env", "REBOUND_TEST_UNSET"}, "environment variable REBOUND_TEST_UNSET is not set"},
		{[]string{"--addr", "127.0.0.1:0", "--token-env", "REBOUND_TEST_TOKENS", "--admin-token-env", "REBOUND_TEST_ADMIN"}, "is also a client token"},
	} {
		if _, err := config(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	got, err := config("--addr", "127.0.0.1:0", "--token-env", "REBOUND_TEST_CLIENT", "--admin-token-env", "REBOUND_TEST_ADMIN")
	if err != nil {
		t.Fatal(err)
	}
	if !got.AdminToken.Set() || !slices.Contains(got.HideEnv, "REBOUND_TEST_ADMIN") || !slices.Contains(got.HideEnv, "REBOUND_TEST_CLIENT") {
		t.Errorf("admin token set %v, hidden from the server %v", got.AdminToken.Set(), got.HideEnv)
	}
}
