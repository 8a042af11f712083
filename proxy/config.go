package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/jsonpos"
)

// Dialects: the wire formats the proxy speaks, which say how an upstream
// takes its key and how an error the proxy writes itself is shaped.
const (
	DialectOpenAI    = "openai"
	DialectAnthropic = "anthropic"
	DialectGemini    = "gemini"
)

// AffinityNone is the UpstreamConfig.Affinity of a pool that keeps no
// conversation on a key: every request goes by headroom.
const AffinityNone = "none"

// FileConfig is the JSON of a --config file. Keys are snake_case; a key
// the proxy does not know is an error, so a misspelt one is not silently
// ignored.
type FileConfig struct {
	// Upstreams by name.
	Upstreams map[string]UpstreamConfig `json:"upstreams"`
	// Routes, in order: a request goes to the first that matches it. With
	// none, every request goes to the upstream named "default", or to the
	// only upstream if there is one.
	Routes []RouteConfig `json:"routes"`
	// Policy is the retry policy of routes that name none, in
	// rebound.Policy's JSON form; absent keys are rebound's defaults.
	// Absent means the proxy's recommended policy.
	Policy json.RawMessage `json:"policy"`
	// PassClientKey passes a client's own provider key (Authorization,
	// x-api-key, x-goog-api-key, api-key, ?key=) to a route's upstream
	// when it has no key_env; never to a fallback, which may be another
	// provider's. False (the default) strips it. It cannot be set with
	// client tokens, which travel in the same places.
	PassClientKey bool `json:"pass_client_key"`
	// AllowHosts and AllowOrigins add to Options' AllowHosts and
	// AllowOrigins.
	AllowHosts   []string `json:"allow_hosts"`
	AllowOrigins []string `json:"allow_origins"`
	// Tenants by name: who calls, each with its own tokens, spend cap,
	// limits and models (see TenantConfig); the --token-env tokens are
	// then the tenant "default". None means no tenants: a token is only
	// a key to the door.
	Tenants map[string]TenantConfig `json:"tenants"`
	// MCPServers by name: MCP servers the proxy serves at /mcp/NAME (see
	// MCPServerConfig), which need Options.MCPServer (rebound proxy has
	// it). None means none.
	MCPServers map[string]MCPServerConfig `json:"mcp_servers"`
	// Prices by model, for the tenants' spend caps and the access log's
	// cost_usd, in cost.Price's JSON form.
	Prices cost.Table `json:"prices"`
	// Version names the config on the status page and in the log: the
	// first 12 hex digits of the SHA-256 of the file's bytes, set by
	// ParseConfig. Empty (a config made in Go) shows none.
	Version string `json:"-"`
}

// UpstreamConfig is one provider endpoint.
type UpstreamConfig struct {
	// URL is the base URL; a request's path and query are appended to its
	// path.
	URL string `json:"url"`
	// Dialect is openai, anthropic or gemini: it says which header
	// carries the key. Empty means openai.
	Dialect string `json:"dialect"`
	// KeyEnv names the environment variable that holds the upstream's
	// key. Keys never live in the file.
	KeyEnv string `json:"key_env"`
	// KeysEnv, in KeyEnv's place, names the variables of a pool of keys
	// of the upstream: each key has its own pace learnt from its own
	// rate-limit headers, its own quota cool-down and its own breaker,
	// and a request goes to the key with the most headroom (see Key pools
	// in the package doc). A key is named by its variable, never its
	// value. Empty (the default) means one key, KeyEnv's.
	KeysEnv []string `json:"keys_env"`
	// Affinity says how a pool of keys (KeysEnv) chooses the key of a
	// request: empty (the default) keeps each conversation on one key,
	// the one that holds the provider's prompt cache of it, while that
	// key has headroom and can take it (see Key pools in the package
	// doc); AffinityNone sends every request to the key with the most
	// headroom. Any other value is an error. It changes nothing for an
	// upstream of one key.
	Affinity string `json:"affinity"`
	// RequestsPerMinute and TokensPerMinute are the upstream's limits
	// (each key's, in a pool), if known; zero means learnt from the
	// rate-limit headers only.
	RequestsPerMinute float64 `json:"requests_per_minute"`
	TokensPerMinute   float64 `json:"tokens_per_minute"`
}

// RouteConfig sends matching requests to an upstream.
type RouteConfig struct {
	// Name names the route in the access log; empty means its index.
	Name string `json:"name"`
	// PathPrefix matches requests whose path starts with it; Model those
	// for that model (from the JSON body, or a Gemini path). A route with
	// both matches requests that have both; one with neither matches all.
	PathPrefix string `json:"path_prefix"`
	Model      string `json:"model"`
	// Upstream is the name of the upstream the route sends to.
	Upstream string `json:"upstream"`
	// Fallbacks are tried in order when the upstream is down (its breaker
	// open), overloaded, out of quota or out of retries.
	Fallbacks []FallbackConfig `json:"fallbacks"`
	// Policy is the route's retry policy, as FileConfig.Policy.
	Policy json.RawMessage `json:"policy"`
	// MaxBodyBytes caps a request body; zero means the proxy's --max-body.
	MaxBodyBytes int64 `json:"max_body_bytes"`
	// SafePaths are paths, besides the model calls rebound knows
	// (rebound.ProviderSideEffects), whose requests have no side effects
	// and are retried whatever came of an attempt, as a model call is.
	// Each is compared whole with the path the client sent (decoded, no
	// query): not a prefix, not a pattern. Empty (the default) means
	// none: a request to any other path the provider may have acted on
	// is sent once, unless the client sends an Idempotency-Key.
	SafePaths []string `json:"safe_paths"`
	// Cache keeps the route's answers, to serve when its upstreams fail
	// or, by its Serve, at once (see CacheConfig). Nil (the default)
	// keeps none.
	Cache *CacheConfig `json:"cache"`
}

// FallbackConfig is another upstream of the route's dialect, and the model
// to ask it for (empty: the request's own).
type FallbackConfig struct {
	Upstream string `json:"upstream"`
	Model    string `json:"model"`
}

// ConfigError says what is wrong with a config file, in one line.
type ConfigError struct {
	// Where is the key at fault, e.g. "routes[1].upstream".
	Where  string
	Reason string
}

func (e *ConfigError) Error() string {
	if e.Where == "" {
		return "config: " + e.Reason
	}
	return "config: " + e.Where + ": " + e.Reason
}

func configErr(where, format string, a ...any) error {
	return &ConfigError{Where: where, Reason: fmt.Sprintf(format, a...)}
}

// ParseConfig reads and checks a config file's JSON; getenv looks up the
// upstreams' key variables, each of which must be set and not empty. A
// file with several mistakes gets an error for each, one a line (joined
// with errors.Join); errors.As finds the first ConfigError.
func ParseConfig(data []byte, getenv func(string) string) (*FileConfig, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var c FileConfig
	if err := dec.Decode(&c); err != nil {
		return nil, jsonError(data, err)
	}
	if dec.More() {
		return nil, configErr("", "more than one JSON value")
	}
	// Every mistake is reported, not only the first, so that a file is
	// put right in one go; each is a ConfigError naming its key.
	var errs []error
	if _, err := parsePolicy("policy", c.Policy, rebound.Policy{}); err != nil {
		errs = append(errs, err)
	}
	if len(c.Upstreams) == 0 {
		errs = append(errs, configErr("upstreams", "none given (want at least one)"))
	}
	for _, name := range slices.Sorted(maps.Keys(c.Upstreams)) {
		u := c.Upstreams[name]
		where := "upstreams." + name
		if err := checkUpstreamName(name); err != nil {
			errs = append(errs, configErr(where, "%v", err))
		}
		if err := checkURL(u.URL); err != nil {
			errs = append(errs, configErr(where+".url", "%v", err))
		}
		switch u.Dialect {
		case "", DialectOpenAI, DialectAnthropic, DialectGemini:
		default:
			errs = append(errs, configErr(where+".dialect", "%q is not openai, anthropic or gemini", u.Dialect))
		}
		if u.KeyEnv != "" && getenv(u.KeyEnv) == "" {
			errs = append(errs, configErr(where+".key_env", "environment variable %s is not set", u.KeyEnv))
		}
		if _, err := poolKeys(where, u, getenv); err != nil {
			errs = append(errs, err)
		}
		if u.RequestsPerMinute < 0 || u.TokensPerMinute < 0 {
			errs = append(errs, configErr(where, "negative limit"))
		}
	}
	if len(c.Routes) == 0 {
		if _, ok := c.Upstreams["default"]; !ok && len(c.Upstreams) > 1 {
			errs = append(errs, configErr("routes", "none given, and no upstream is named \"default\""))
		}
	}
	for i, r := range c.Routes {
		where := fmt.Sprintf("routes[%d]", i)
		up, ok := c.Upstreams[r.Upstream]
		if !ok {
			errs = append(errs, configErr(where+".upstream", "unknown upstream %q", r.Upstream))
		}
		if r.PathPrefix != "" && !strings.HasPrefix(r.PathPrefix, "/") {
			errs = append(errs, configErr(where+".path_prefix", "%q does not start with /", r.PathPrefix))
		}
		if _, err := parsePolicy(where+".policy", r.Policy, rebound.Policy{}); err != nil {
			errs = append(errs, err)
		}
		if r.MaxBodyBytes < 0 {
			errs = append(errs, configErr(where+".max_body_bytes", "negative"))
		}
		if r.Cache != nil {
			if _, err := r.Cache.config(where + ".cache"); err != nil {
				errs = append(errs, err)
			}
		}
		for j, sp := range r.SafePaths {
			if err := checkSafePath(sp, r.PathPrefix); err != nil {
				errs = append(errs, configErr(fmt.Sprintf("%s.safe_paths[%d]", where, j), "%v", err))
			}
		}
		for j, f := range r.Fallbacks {
			fwhere := fmt.Sprintf("%s.fallbacks[%d]", where, j)
			fu, fok := c.Upstreams[f.Upstream]
			switch {
			case !fok:
				errs = append(errs, configErr(fwhere+".upstream", "unknown upstream %q", f.Upstream))
			case ok && dialectOr(fu.Dialect) != dialectOr(up.Dialect):
				errs = append(errs, configErr(fwhere+".upstream", "%q speaks %s, the route's upstream %s", f.Upstream, dialectOr(fu.Dialect), dialectOr(up.Dialect)))
			}
		}
	}
	if err := checkTenants(&c, getenv); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkMCP(&c, getenv)...)
	switch len(errs) {
	case 0:
	case 1:
		return nil, errs[0]
	default:
		return nil, errors.Join(errs...)
	}
	c.Version = ConfigVersion(data)
	return &c, nil
}

// jsonError turns a decoding error into a ConfigError that says where:
// the key, and the line and column (jsonpos, which rebound mcp's --config
// shares).
func jsonError(data []byte, err error) error {
	var typ *json.UnmarshalTypeError
	if errors.As(err, &typ) {
		line, column := jsonpos.Position(data, typ.Offset)
		return configErr(typ.Field, "line %d, column %d: %s given, want %s", line, column, typ.Value, typ.Type)
	}
	return configErr("", "%v", jsonpos.Error(data, err))
}

// checkURL reports what is wrong with an upstream's base URL.
func checkURL(s string) error {
	if s == "" {
		return errors.New("empty (want e.g. https://api.openai.com)")
	}
	u, err := url.Parse(s)
	shown := quoteURL(s)
	switch {
	case err != nil:
		return fmt.Errorf("%s does not parse", shown)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%s is not an http or https URL", shown)
	case u.Host == "":
		return fmt.Errorf("%s has no host", shown)
	case u.User != nil:
		return errors.New("carries credentials: put the key in key_env's variable")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%s has a query or fragment", shown)
	}
	return nil
}

// checkSafePath reports what is wrong with a safe path of a route whose
// path prefix is prefix.
func checkSafePath(p, prefix string) error {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q does not start with /", p)
	case strings.Contains(p, "*"):
		return fmt.Errorf("%q has a \"*\": safe paths are exact paths, not patterns", p)
	case strings.ContainsAny(p, "?#"):
		return fmt.Errorf("%q has a query or fragment", p)
	case strings.Contains(p, "%"):
		return fmt.Errorf("%q has an escape: give the path decoded", p)
	case hasDotSegment(p):
		return fmt.Errorf("%q has \".\" or \"..\" segments", p)
	case !strings.HasPrefix(p, prefix):
		return fmt.Errorf("%q is outside the route's path_prefix %q: no request to it comes by the route", p, prefix)
	}
	return nil
}

// safePaths returns a route's safe paths as a set; nil for none.
func safePaths(paths []string) map[string]bool {
	if len(paths) == 0 {
		return nil
	}
	set := make(map[string]bool, len(paths))
	for _, p := range paths {
		set[p] = true
	}
	return set
}

// quoteURL quotes s for an error message, unless it may carry a
// credential (a userinfo, a query: "@" or "?" anywhere, since s may not
// parse), which an error would print into whatever keeps the logs.
func quoteURL(s string) string {
	if strings.ContainsAny(s, "@?") {
		return "the URL (not shown: it may carry a credential)"
	}
	return strconv.Quote(s)
}

func dialectOr(d string) string {
	if d == "" {
		return DialectOpenAI
	}
	return d
}

// dialectOfPath guesses a request's dialect from its path, for an
// upstream whose dialect is not configured.
func dialectOfPath(path string) string {
	switch {
	case strings.Contains(path, "/messages"):
		return DialectAnthropic
	case strings.Contains(path, ":generateContent"), strings.Contains(path, ":streamGenerateContent"), strings.Contains(path, "/models/"):
		return DialectGemini
	}
	return DialectOpenAI
}

// parsePolicy reads a policy in rebound.Policy's JSON form; absent, it is
// def.
func parsePolicy(where string, raw json.RawMessage, def rebound.Policy) (rebound.Policy, error) {
	if len(raw) == 0 {
		return def, nil
	}
	var p rebound.Policy
	if err := p.UnmarshalJSON(raw); err != nil {
		return def, configErr(where, "%s", strings.TrimPrefix(err.Error(), "rebound: policy: "))
	}
	return p, nil
}
