package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound/tool"
)

// MCPPathPrefix starts the path of every MCP server of the config: the
// server NAME is served at MCPPathPrefix+NAME, matched before any route.
const MCPPathPrefix = "/mcp/"

// MCPServerConfig is one MCP server of the config (FileConfig.MCPServers),
// which the proxy serves at /mcp/NAME over streamable HTTP with every
// guarantee of rebound mcp: either a stdio server (Command), which runs as
// the proxy's child process, or a streamable HTTP one (URL).
type MCPServerConfig struct {
	// Command is a stdio server's command and its arguments. Its process
	// gets the proxy's PATH, HOME and TMPDIR, the variables EnvFrom
	// names, and Env: no other of the proxy's, which hold its keys and
	// tokens.
	Command []string `json:"command"`
	// Env sets variables of the command's process.
	Env map[string]string `json:"env"`
	// EnvFrom names variables of the proxy's environment that the
	// command's process gets; each must be set.
	EnvFrom []string `json:"env_from"`
	// URL is a streamable HTTP server's endpoint, in Command's place.
	URL string `json:"url"`
	// HeadersEnv are headers sent to URL, each with the value of the
	// environment variable it names ({"Authorization": "VAR"}): a
	// server's key never lives in the file.
	HeadersEnv map[string]string `json:"headers_env"`
	// Tools say, by tool name, whether a call may be sent again after it
	// may have run: "read-only", "idempotent" or "side-effects", as
	// rebound mcp --config has them. A tool not named is judged by its
	// annotations, if TrustAnnotations, else sent once.
	Tools map[string]string `json:"tools"`
	// TrustAnnotations resends a cut-short call of a tool that says
	// readOnlyHint or idempotentHint. Absent means true, as rebound mcp's
	// --trust-annotations.
	TrustAnnotations *bool `json:"trust_annotations"`
}

// ToolKinds returns Tools as tool kinds; a config ParseConfig accepted
// has no other value.
func (c MCPServerConfig) ToolKinds() map[string]tool.Kind {
	kinds := make(map[string]tool.Kind, len(c.Tools))
	for name, s := range c.Tools {
		var k tool.Kind
		if k.UnmarshalText([]byte(s)) == nil {
			kinds[name] = k
		}
	}
	return kinds
}

// Trusted reports whether annotations are trusted (TrustAnnotations, true
// when absent).
func (c MCPServerConfig) Trusted() bool { return c.TrustAnnotations == nil || *c.TrustAnnotations }

// Environ returns the environment of a stdio server's process, read from
// getenv (nil: os.Getenv): see Command.
func (c MCPServerConfig) Environ(getenv func(string) string) []string {
	if getenv == nil {
		getenv = os.Getenv
	}
	var env []string
	for _, name := range append([]string{"PATH", "HOME", "TMPDIR"}, c.EnvFrom...) {
		if v := getenv(name); v != "" {
			env = append(env, name+"="+v)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(c.Env)) {
		env = append(env, name+"="+c.Env[name])
	}
	return env
}

// An MCPCaller is who a request to /mcp/NAME comes from, as the proxy's
// door found it, for the handler of Options.MCPServer to read from the
// request's context (MCPCallerFrom).
type MCPCaller struct {
	// Holder stands for the client token the request carries (a hash of
	// it, never the token); empty without tokens. A handler binds a
	// session to the holder that opened it.
	Holder string
	// Tenant is the caller's tenant; empty without tenants.
	Tenant string
	// Tools are the tools of the server the caller may list and call;
	// nil means every one.
	Tools []string
}

type mcpCallerKey struct{}

// MCPCallerFrom returns the caller the proxy put in ctx, a request's to
// /mcp/NAME.
func MCPCallerFrom(ctx context.Context) (MCPCaller, bool) {
	c, ok := ctx.Value(mcpCallerKey{}).(MCPCaller)
	return c, ok
}

var mcpServerName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// checkMCP reports every mistake of c's MCP servers and of its tenants'
// lists of them, each naming its key.
func checkMCP(c *FileConfig, getenv func(string) string) []error {
	var errs []error
	bad := func(where, format string, a ...any) { errs = append(errs, configErr(where, format, a...)) }
	for _, name := range slices.Sorted(maps.Keys(c.MCPServers)) {
		s, where := c.MCPServers[name], "mcp_servers."+name
		if len(name) > maxTenantName || !mcpServerName.MatchString(name) {
			bad("mcp_servers", "name %q is not %s", name, tenantNameRule)
		}
		switch {
		case len(s.Command) > 0 && s.URL != "":
			bad(where, "both command and url: a server is one or the other")
		case len(s.Command) == 0 && s.URL == "":
			bad(where, `neither command nor url (want {"command": ["npx", "-y", "PACKAGE"]} or {"url": "https://HOST/mcp"})`)
		case len(s.Command) > 0:
			if strings.TrimSpace(s.Command[0]) == "" {
				bad(where+".command", "the command's name is empty")
			}
			if len(s.HeadersEnv) > 0 {
				bad(where+".headers_env", "goes with url, not command")
			}
		default:
			if err := checkURL(s.URL); err != nil {
				bad(where+".url", "%v", err)
			}
			if len(s.Env) > 0 || len(s.EnvFrom) > 0 {
				bad(where, "env and env_from go with command, not url")
			}
		}
		for _, v := range slices.Sorted(maps.Keys(s.Env)) {
			if !envName.MatchString(v) {
				bad(where+".env", "%q is not a variable's name", v)
			}
		}
		for _, v := range s.EnvFrom {
			if !envName.MatchString(v) || getenv(v) == "" {
				bad(where+".env_from", "environment variable %q is not set", v)
			}
		}
		for _, h := range slices.Sorted(maps.Keys(s.HeadersEnv)) {
			if v := s.HeadersEnv[h]; getenv(v) == "" {
				bad(where+".headers_env."+h, "environment variable %q is not set", v)
			}
		}
		for _, t := range slices.Sorted(maps.Keys(s.Tools)) {
			var k tool.Kind
			if k.UnmarshalText([]byte(s.Tools[t])) != nil {
				bad(where+".tools."+t, `%q is not "read-only", "idempotent" or "side-effects"`, s.Tools[t])
			}
		}
	}
	for _, tn := range slices.Sorted(maps.Keys(c.Tenants)) {
		m := c.Tenants[tn].MCP
		for _, name := range slices.Sorted(maps.Keys(m)) {
			where := "tenants." + tn + ".mcp." + name
			if _, ok := c.MCPServers[name]; !ok {
				bad(where, "unknown MCP server %q (not in mcp_servers)", name)
			}
			tools := m[name]
			switch {
			case len(tools) == 0:
				bad(where, `no tools listed: list them, or ["*"] for all, or leave the server out`)
			case slices.Contains(tools, "*") && len(tools) > 1:
				bad(where, `"*" with other tools: "*" stands alone`)
			case slices.Contains(tools, ""):
				bad(where, "a tool's name is empty")
			}
		}
	}
	return errs
}

// mcpServers are the proxy's MCP servers' handlers, by name; a reload's
// Proxy shares those whose config it keeps.
type mcpServers struct {
	config   map[string]MCPServerConfig
	handlers map[string]http.Handler
	status   map[string]*mcpStatus // the status page's figures, kept with the handler
	// replaced are the handlers of the Proxy this one was reloaded from
	// that it does not keep (their servers removed or changed), for
	// CloseReplaced.
	mu       sync.Mutex
	replaced []http.Handler
	// retiring holds the replaced handlers finishing their calls; the
	// Proxies of one chain of reloads share it, so that Close of the
	// last ends them all.
	retiring *retirement
	retired  bool // retireAll has retired the handlers
}

// newMCPServers makes the handlers of c's MCP servers with make, each
// given the mcpStatus it reports to; with prev's servers (a reload), it
// keeps each whose config is unchanged, with its status, and makes the
// others anew.
func newMCPServers(c *FileConfig, make func(string, MCPServerConfig, *mcpStatus) (http.Handler, error), prev *mcpServers) (*mcpServers, error) {
	var want map[string]MCPServerConfig
	if c != nil {
		want = c.MCPServers
	}
	s := &mcpServers{config: want, handlers: map[string]http.Handler{}, status: map[string]*mcpStatus{}, retiring: &retirement{}}
	if prev != nil {
		s.retiring = prev.retiring
	}
	if len(want) > 0 && make == nil {
		return nil, errors.New("config: mcp_servers given, but this proxy has no way to serve MCP servers (Options.MCPServer)")
	}
	kept := map[string]bool{}
	var made []http.Handler
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if old, ok := prev.handlerOf(name); ok && reflect.DeepEqual(prev.config[name], want[name]) {
			s.handlers[name], kept[name] = old, true
			s.status[name] = prev.status[name]
			continue
		}
		s.status[name] = &mcpStatus{}
		h, err := make(name, want[name], s.status[name])
		if err != nil {
			closeHandlers(made)
			return nil, fmt.Errorf("mcp_servers.%s: %v", name, err)
		}
		made = append(made, h)
		s.handlers[name] = h
	}
	if prev != nil {
		for _, name := range slices.Sorted(maps.Keys(prev.handlers)) {
			if !kept[name] {
				s.replaced = append(s.replaced, prev.handlers[name])
			}
		}
	}
	return s, nil
}

// handlerOf returns the handler of the server name, if s (nil: none) has it.
func (s *mcpServers) handlerOf(name string) (http.Handler, bool) {
	if s == nil {
		return nil, false
	}
	h, ok := s.handlers[name]
	return h, ok
}

// closeReplaced retires the handlers s replaced, once: each refuses new
// sessions at once and finishes its calls in flight for up to grace (see
// retirement).
func (s *mcpServers) closeReplaced(grace time.Duration) {
	s.mu.Lock()
	replaced := s.replaced
	s.replaced = nil
	s.mu.Unlock()
	s.retiring.retire(replaced, grace)
}

// retireAll retires every handler, as closeReplaced retires those s
// replaced, once.
func (s *mcpServers) retireAll(grace time.Duration) {
	s.mu.Lock()
	all := s.replaced
	s.replaced = nil
	if !s.retired {
		s.retired = true
		all = append(all, slices.Collect(maps.Values(s.handlers))...)
	}
	s.mu.Unlock()
	s.retiring.retire(all, grace)
}

// Close closes every handler: those replaced and those still finishing
// their calls at once.
func (s *mcpServers) Close() error {
	s.mu.Lock()
	replaced := s.replaced
	s.replaced = nil
	s.mu.Unlock()
	s.retiring.end()
	return errors.Join(closeHandlers(replaced), closeHandlers(slices.Collect(maps.Values(s.handlers))))
}

// closeHandlers closes each of hs that is an io.Closer.
func closeHandlers(hs []http.Handler) error {
	var errs []error
	for _, h := range hs {
		if c, ok := h.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// mcpServerOf returns the name of the MCP server path is served at, if it
// is one of the config's.
func (p *Proxy) mcpServerOf(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, MCPPathPrefix)
	if !ok || p.mcp == nil {
		return "", false
	}
	name, _, _ := strings.Cut(rest, "/")
	_, ok = p.mcp.handlers[name]
	return name, ok
}

// mcpTools returns the tools of the server name that t may use (nil: all)
// and whether t may use the server at all.
func (t *tenant) mcpTools(name string) ([]string, bool) {
	if t == nil {
		return nil, false
	}
	tools, ok := t.mcp[name]
	if !ok {
		return nil, false
	}
	if slices.Contains(tools, "*") {
		return nil, true
	}
	return tools, true
}

// writeRPCError writes a JSON-RPC error with no id, as an MCP client
// reads an HTTP request's refusal.
func writeRPCError(w http.ResponseWriter, status int, msg string) {
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": nil, "error": map[string]any{"code": -32000, "message": msg}})
	writeJSON(w, status, string(body))
}
