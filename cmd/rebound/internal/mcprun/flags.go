package mcprun

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/cliflag"
	"github.com/rebound-go/rebound/cmd/rebound/internal/proxyrun"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
	"github.com/rebound-go/rebound/internal/frontdoor"
	"github.com/rebound-go/rebound/internal/jsonpos"
	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/tool"
)

// Flags are the flags of "rebound mcp": those read straight into the
// Config, and those Config fills it in from.
type Flags struct {
	c                                          Config
	tokenEnv, tokensFile, configFile, logLevel string
	adminTokenEnv                              string
	trustAnnotations                           bool
}

// DefineFlags defines the flags of "rebound mcp" on fs, with their
// defaults, and returns where they are parsed into.
func DefineFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	c := &f.c
	o := &c.Options
	fs.StringVar(&c.Upstream, "upstream", "", "front the streamable HTTP MCP server at this `URL` (instead of -- COMMAND)")
	fs.StringVar(&c.Addr, "addr", "", "serve streamable HTTP at http://`host:port`/mcp instead of stdio (port 0 picks a free port); a non-loopback address needs tokens")
	fs.StringVar(&o.Name, "name", "", "the server's `name` in logs and errors (default: the package npx, uvx and the like run, as server-memory; else the command's base name, or the URL's host)")
	fs.DurationVar(&o.DownWait, "down-wait", 10*time.Second, "how long a call waits for a server that is down before it fails (0: fail at once; else at least 100ms)")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", 60*time.Second, "cancel a call with no result and no progress for this long (0: never; else at least 100ms)")
	fs.DurationVar(&o.RestartMin, "restart-min", 100*time.Millisecond, "first wait between restarts after the immediate one; doubles up to --restart-max")
	fs.DurationVar(&o.RestartMax, "restart-max", 2*time.Second, "longest wait between restarts")
	fs.DurationVar(&o.HealthyAfter, "healthy-after", 10*time.Second, "running this long resets the restart backoff")
	fs.IntVar(&o.CrashLimit, "crash-limit", 10, "this many `crashes` within --crash-window stop the restarts for --crash-cooldown")
	fs.DurationVar(&o.CrashWindow, "crash-window", 30*time.Second, "the window --crash-limit counts crashes in")
	fs.DurationVar(&o.CrashCooldown, "crash-cooldown", 30*time.Second, "how long restarts stop after --crash-limit crashes; then one start is tried")
	fs.BoolVar(&f.trustAnnotations, "trust-annotations", true, "resend a cut-short tools/call whose tool says readOnlyHint or idempotentHint (false: only tools the --config file calls read-only or idempotent)")
	fs.StringVar(&f.configFile, "config", "", `JSON `+"`file`"+` of per-tool rules: {"tools": {"NAME": "read-only" | "idempotent" | "side-effects"}}`)
	fs.StringVar(&f.logLevel, "log", "info", "`level` of the JSON logs on stderr: debug, info (a line per request), warn, or off")
	fs.StringVar(&f.tokenEnv, "token-env", "", "with --addr: environment `variable` holding the client tokens, comma-separated (not passed on to the server)")
	fs.StringVar(&f.adminTokenEnv, "admin-token-env", "", "with --addr: environment `variable` holding the admin token, which opens /metrics to requests from beyond this machine (Authorization: Bearer); not a client token (not passed on to the server)")
	fs.StringVar(&f.tokensFile, "tokens-file", "", "with --addr: `file` of client tokens, one a line")
	fs.Var((*cliflag.List)(&c.Door.AllowHosts), "allow-host", "with --addr and no tokens, answer requests for this host `name` too, besides loopback names (repeatable, or comma-separated)")
	fs.Var((*cliflag.List)(&c.Door.AllowOrigins), "allow-origin", "with --addr: let web pages of this `origin` (https://app.example.com) call, with CORS headers (repeatable, or comma-separated; * only with tokens)")
	fs.IntVar(&c.MaxSessions, "max-sessions", defaultMaxSessions, "with --addr: most client sessions open at once, each with its own server connection (a process, for a command)")
	fs.DurationVar(&c.SessionTimeout, "session-timeout", defaultSessionTimeout, "with --addr: end a session that has had no request for this long (0: never)")
	fs.DurationVar(&c.Drain, "drain-timeout", 10*time.Second, "with --addr: how long requests in flight may finish after SIGTERM")
	return f
}

// CutDashes splits args at the first "--": the flags before it, the
// server's command after it.
func CutDashes(args []string) (flags, command []string, dashes bool) {
	i := slices.Index(args, "--")
	if i < 0 {
		return args, nil, false
	}
	return args[:i], args[i+1:], true
}

// FirstArgument returns the first of args that is neither a flag of fs
// nor a flag's value: a server's command given without "--", whose own
// flags would otherwise be reported as rebound's unknown ones.
func FirstArgument(fs *flag.FlagSet, args []string) (string, bool) {
	for i := 0; i < len(args); i++ {
		name, isFlag := strings.CutPrefix(args[i], "-")
		if !isFlag || name == "" {
			return args[i], true
		}
		name = strings.TrimPrefix(name, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			return "", false // an unknown flag: the parser says so
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			i++ // its value
		}
	}
	return "", false
}

// Config checks the flags parsed into fs (defined there by DefineFlags)
// with the server's command (what followed "--", if dashes) and returns
// the run they ask for, filled in from files and the environment: the
// tool rules, the tokens, the log level. An error is bad usage, in one
// line.
func (f *Flags) Config(fs *flag.FlagSet, command []string, dashes bool) (Config, error) {
	c := f.c
	c.Command = command
	if err := f.complete(fs, &c, dashes); err != nil {
		return Config{}, err
	}
	return c, nil
}

// complete checks c's flags and fills in what they leave to files and the
// environment: the tool rules, the tokens, the log level.
func (f *Flags) complete(fs *flag.FlagSet, c *Config, dashes bool) error {
	o := &c.Options
	switch {
	case dashes && len(c.Command) == 0:
		return errors.New("-- without a command: give the server's command after it")
	case len(c.Command) > 0 && c.Upstream != "":
		return errors.New("--upstream and a command both given: front one server")
	case len(c.Command) == 0 && c.Upstream == "":
		return errors.New("give the server: rebound mcp [flags] -- COMMAND [ARGS...], or --upstream URL")
	}
	if c.Addr == "" {
		if name := cliflag.FirstGiven(cliflag.Given(fs), "token-env", "tokens-file", "admin-token-env", "allow-host", "allow-origin", "max-sessions", "session-timeout", "drain-timeout"); name != "" {
			return fmt.Errorf("--%s goes with --addr (over stdio the one client is the process that started rebound)", name)
		}
	}
	if c.Upstream != "" {
		if err := checkUpstream(c.Upstream); err != nil {
			return err
		}
	}
	if err := checkDurations(o, c); err != nil {
		return err
	}
	if o.CrashLimit < 1 {
		return fmt.Errorf("--crash-limit %d: want at least 1 crash", o.CrashLimit)
	}
	if c.MaxSessions < 1 {
		return fmt.Errorf("--max-sessions %d: want at least 1", c.MaxSessions)
	}
	// The command line's zero means none; reboundmcp's zero means its
	// default, and a negative value none.
	for _, d := range []*time.Duration{&o.DownWait, &o.IdleTimeout} {
		if *d == 0 {
			*d = -1
		}
	}
	o.IgnoreAnnotations = !f.trustAnnotations
	var err error
	if c.LogLevel, c.LogOff, err = logLevel(f.logLevel); err != nil {
		return err
	}
	c.ConfigFile = f.configFile
	if f.configFile != "" {
		if o.Tools, err = readToolRules(f.configFile); err != nil {
			return err
		}
	}
	if c.Addr == "" {
		return nil
	}
	return f.completeHTTP(c)
}

// completeHTTP checks --addr and reads the client tokens it needs.
func (f *Flags) completeHTTP(c *Config) error {
	host, err := serve.CheckAddr(c.Addr)
	if err != nil {
		return err
	}
	if c.Door.Tokens, err = proxyrun.ReadTokens(f.tokenEnv, f.tokensFile); err != nil {
		return err
	}
	if f.tokenEnv != "" {
		c.HideEnv = []string{f.tokenEnv}
	}
	if !serve.IsLoopback(host) && len(c.Door.Tokens) == 0 {
		return fmt.Errorf("--addr %s is not a loopback address: give client tokens (--token-env or --tokens-file)", c.Addr)
	}
	if f.adminTokenEnv != "" {
		token := strings.TrimSpace(os.Getenv(f.adminTokenEnv))
		if token == "" {
			return fmt.Errorf("--admin-token-env: environment variable %s is not set", f.adminTokenEnv)
		}
		if slices.ContainsFunc(c.Door.Tokens, func(t string) bool { return strings.TrimSpace(t) == token }) {
			return errors.New("the admin token (--admin-token-env) is also a client token: a client could open /metrics")
		}
		c.AdminToken = frontdoor.NewAdminToken(token)
		c.HideEnv = append(c.HideEnv, f.adminTokenEnv)
	}
	return nil
}

// checkUpstream checks --upstream is an http or https URL. It does not
// quote it: hosted servers take their keys in a URL's user, path or query.
func checkUpstream(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("--upstream is not an http:// or https:// URL with a host (e.g. http://127.0.0.1:3001/mcp)")
	}
	return nil
}

// leastWait is the shortest --down-wait and --idle-timeout but 0 (none):
// a call, and a restart's replay, which the idle timeout bounds, take
// longer than a few milliseconds, and less would fail every one of them.
const leastWait = 100 * time.Millisecond

// checkDurations refuses negative durations, waits under leastWait and
// restart bounds out of order.
func checkDurations(o *reboundmcp.Options, c *Config) error {
	for _, d := range []struct {
		name     string
		v        time.Duration
		positive bool
		least    time.Duration // but 0
	}{
		{"down-wait", o.DownWait, false, leastWait}, {"idle-timeout", o.IdleTimeout, false, leastWait},
		{"restart-min", o.RestartMin, true, 0}, {"restart-max", o.RestartMax, true, 0}, {"healthy-after", o.HealthyAfter, true, 0},
		{"crash-window", o.CrashWindow, true, 0}, {"crash-cooldown", o.CrashCooldown, true, 0},
		{"session-timeout", c.SessionTimeout, false, 0}, {"drain-timeout", c.Drain, false, 0},
	} {
		switch {
		case d.v < 0:
			return fmt.Errorf("--%s %v is negative", d.name, d.v)
		case d.positive && d.v == 0:
			return fmt.Errorf("--%s 0: want a positive duration", d.name)
		case d.v > 0 && d.v < d.least:
			return fmt.Errorf("--%s %v: want 0 (none) or at least %v", d.name, d.v, d.least)
		}
	}
	if o.RestartMin > o.RestartMax {
		return fmt.Errorf("--restart-min %v is over --restart-max %v", o.RestartMin, o.RestartMax)
	}
	return nil
}

// logLevel reads --log.
func logLevel(s string) (level slog.Level, off bool, err error) {
	switch s {
	case "off":
		return 0, true, nil
	case "debug", "info", "warn":
		err := level.UnmarshalText([]byte(s))
		return level, false, err
	}
	return 0, false, fmt.Errorf("--log %q: want debug, info, warn or off", s)
}

// toolRules is the --config file.
type toolRules struct {
	Tools toolEntries `json:"tools"`
}

// toolEntries is the "tools" object, read refusing a name given twice,
// which encoding/json would let the last one win: a side-effecting tool
// named again further down as read-only would be resent after a crash.
type toolEntries map[string]json.RawMessage

func (t *toolEntries) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf(`"tools" is %.20s, not an object`, data)
	}
	entries := toolEntries{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := tok.(string)
		var rule json.RawMessage
		if err := dec.Decode(&rule); err != nil {
			return err
		}
		if _, twice := entries[name]; twice {
			return fmt.Errorf("tools[%q] is given twice", name)
		}
		entries[name] = rule
	}
	*t = entries
	return nil
}

// readToolRules reads the --config file strictly: one object with
// "tools", each a rule's name; the first bad entry is named.
func readToolRules(file string) (map[string]tool.Kind, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--config: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var cfg toolRules
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("--config %s: %v (want {\"tools\": {\"NAME\": \"read-only\"}})", file, jsonpos.Error(data, err))
	}
	if dec.More() {
		return nil, fmt.Errorf("--config %s: something after the object", file)
	}
	if cfg.Tools == nil {
		return nil, fmt.Errorf(`--config %s: no "tools" object (want {"tools": {"NAME": "read-only"}})`, file)
	}
	rules := make(map[string]tool.Kind, len(cfg.Tools))
	for _, name := range slices.Sorted(maps.Keys(cfg.Tools)) {
		var s string
		var r tool.Kind
		if err := json.Unmarshal(cfg.Tools[name], &s); err != nil || r.UnmarshalText([]byte(s)) != nil {
			return nil, fmt.Errorf("--config %s: tools[%q] is %s: want \"read-only\", \"idempotent\" or \"side-effects\"", file, name, cfg.Tools[name])
		}
		rules[name] = r
	}
	return rules, nil
}
