package proxy

import (
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/ratelimit"
)

// Periods of a tenant's spend cap, in UTC.
const (
	PeriodDay   = "day"   // from midnight to midnight
	PeriodMonth = "month" // from the first of the month to the first of the next
)

// DefaultTenant is the tenant of the client tokens of Options.Tokens
// (--token-env, --tokens-file): a tenant of that name in the config
// sets its cap, limits and models.
const DefaultTenant = "default"

// TenantMaxWait is the longest a request waits for its tenant's
// requests_per_minute and tokens_per_minute: long enough to smooth a
// burst of a few requests over a limiter's pace, short enough that a
// tenant past its limit learns it at once (a 429 with Retry-After) rather
// than holding a connection and its body's memory in the proxy.
const TenantMaxWait = time.Second

// Bounds on a tenant's figures: far beyond any real one, and small enough
// that no sum, micro-dollar count or pace built from them overflows.
const (
	maxTenantUSD   = 1e9 // a spend cap, in US dollars
	maxTenantRate  = 1e9 // requests or tokens a minute
	maxTenantName  = 64
	tenantNameRule = "letters, digits, '.', '_' or '-', at most 64"
)

var tenantName = regexp.MustCompile(`^[A-Za-z0-9._-]+$`)

// TenantConfig is one tenant of the proxy: an agent, a team or a
// customer, known by its client tokens and held to its own spend cap,
// limits and models before anything is sent upstream.
type TenantConfig struct {
	// TokensEnv names the environment variable that holds the tenant's
	// client tokens, comma-separated, read as --token-env's is. Required,
	// but for the tenant "default", whose tokens are --token-env's (and
	// its own, if it names a variable). A token belongs to one tenant.
	TokensEnv string `json:"tokens_env"`
	// SpendCapUSD is what the tenant's requests may cost in each Period,
	// in US dollars, priced by the config's prices: an attempt that could
	// take the tenant past it is refused before it is sent (cost.WithCaps'
	// estimate-then-settle rule), with the dialect's quota error. Absent
	// means no cap; 0 allows nothing that costs. A capped tenant must list
	// its Models, each with a price: a cap it cannot price it cannot keep.
	SpendCapUSD *float64 `json:"spend_cap_usd"`
	// Period is "day" or "month", in UTC, with a cap only. Empty means
	// "day".
	Period string `json:"period"`
	// RequestsPerMinute and TokensPerMinute limit the tenant's requests
	// (tokens: a request's body, a token for each 4 bytes, corrected by
	// the usage its answer reports). A request waits up to TenantMaxWait
	// for them, then gets a 429 with Retry-After. Zero means no limit.
	RequestsPerMinute float64 `json:"requests_per_minute"`
	TokensPerMinute   float64 `json:"tokens_per_minute"`
	// Models are the models the tenant may ask for; a request for another
	// gets a 403 in its dialect. Every model a request may run is checked:
	// the one its path names (Gemini's, Azure's deployment), which the
	// provider serves whatever the body says, else its body's, and each of
	// a batch's requests'. A request that runs no model (a GET, a file
	// upload, a delete) passes. Empty means any.
	Models []string `json:"models"`
	// AllowUnseenModels lets a tenant with Models send a model call whose
	// model the proxy cannot see: a batch over an uploaded file, a stored
	// prompt, a form (an audio transcription), a compressed body. Without
	// it such a call gets a 403, since the model it runs may be any.
	AllowUnseenModels bool `json:"allow_unseen_models"`
	// MCP gives the tenant MCP servers of the config's mcp_servers, each
	// with the tools it may list and call (["*"] for all). A server not
	// given answers the tenant 404, as if there were none. Empty means
	// none.
	MCP map[string][]string `json:"mcp"`
}

// tokensIn returns the comma-separated tokens of an environment
// variable's value, trimmed, blank ones left out.
func tokensIn(value string) []string {
	var out []string
	for t := range strings.SplitSeq(value, ",") {
		if t = strings.TrimSpace(t); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// checkTenants reports what is wrong with c's tenants and prices, in one
// line naming the key at fault (never a token).
func checkTenants(c *FileConfig, getenv func(string) string) error {
	for _, model := range slices.Sorted(maps.Keys(c.Prices)) {
		p, where := c.Prices[model], "prices."+model
		switch {
		case model == "":
			return configErr("prices", "a model name is empty")
		}
		if err := p.Validate(); err != nil {
			return configErr(where, "%v", err)
		}
	}
	owner := map[string]string{} // token -> tenant
	capped := false
	for _, name := range slices.Sorted(maps.Keys(c.Tenants)) {
		t, where := c.Tenants[name], "tenants."+name
		if len(name) > maxTenantName || !tenantName.MatchString(name) {
			return configErr("tenants", "name %q is not %s", name, tenantNameRule)
		}
		switch {
		case t.TokensEnv == "" && name != DefaultTenant:
			return configErr(where+".tokens_env", "missing: name the variable that holds the tenant's tokens")
		case t.TokensEnv != "":
			toks := tokensIn(getenv(t.TokensEnv))
			if len(toks) == 0 {
				return configErr(where+".tokens_env", "environment variable %s is not set or holds no token", t.TokensEnv)
			}
			for _, tok := range toks {
				if other, ok := owner[tok]; ok && other != name {
					return configErr(where+".tokens_env", "a token in %s is also tenant %q's: a token belongs to one tenant", t.TokensEnv, other)
				}
				owner[tok] = name
			}
		}
		if t.SpendCapUSD != nil {
			capped = true
			if usd := *t.SpendCapUSD; !(usd >= 0 && usd <= maxTenantUSD) {
				return configErr(where+".spend_cap_usd", "%g is negative or above $%g", usd, float64(maxTenantUSD))
			}
		}
		switch t.Period {
		case "", PeriodDay, PeriodMonth:
			if t.Period != "" && t.SpendCapUSD == nil {
				return configErr(where+".period", "given without spend_cap_usd")
			}
		default:
			return configErr(where+".period", "%q is not day or month", t.Period)
		}
		if !(t.RequestsPerMinute >= 0 && t.RequestsPerMinute <= maxTenantRate) {
			return configErr(where+".requests_per_minute", "%g is negative or above %g", t.RequestsPerMinute, float64(maxTenantRate))
		}
		if !(t.TokensPerMinute >= 0 && t.TokensPerMinute <= maxTenantRate) {
			return configErr(where+".tokens_per_minute", "%g is negative or above %g", t.TokensPerMinute, float64(maxTenantRate))
		}
		if t.SpendCapUSD != nil && len(t.Models) == 0 {
			return configErr(where+".models", "none listed with spend_cap_usd: a capped tenant lists its models, each with a price")
		}
		for i, m := range t.Models {
			if strings.TrimSpace(m) == "" {
				return configErr(fmt.Sprintf("%s.models[%d]", where, i), "empty")
			}
			if _, ok := c.Prices[m]; t.SpendCapUSD != nil && !ok {
				return configErr(fmt.Sprintf("%s.models[%d]", where, i), "%q has no price in \"prices\": a cap it cannot price it cannot keep", m)
			}
		}
	}
	if !capped {
		return nil
	}
	for i, r := range c.Routes {
		for j, f := range r.Fallbacks {
			if _, ok := c.Prices[f.Model]; f.Model != "" && !ok {
				return configErr(fmt.Sprintf("routes[%d].fallbacks[%d].model", i, j), "%q has no price in \"prices\", which a capped tenant's request may be sent to", f.Model)
			}
		}
	}
	return nil
}

// tenants are the proxy's tenants, by the index of their tokens at the
// door, and the prices of the access log's cost_usd.
type tenants struct {
	tokens  []string  // the door's client tokens: Options.Tokens, then each tenant's
	byToken []*tenant // the tenant of each of tokens, nil for none
	list    []*tenant // by name
	prices  cost.Table
}

// refusal is why a tenant's request was refused before it was sent.
type refusal uint8

const (
	refusedSpendCap refusal = iota
	refusedRateLimit
	refusedModel
	numRefusals
)

var refusalNames = [numRefusals]string{"spend_cap", "rate_limit", "model"}

// tenant is one tenant, ready: its cap, pacer and models, and its tallies
// for the status page and /metrics.
type tenant struct {
	name     string
	cap      cost.Cap // nil: uncapped
	capUSD   float64
	period   string
	pacer    ratelimit.Pacer // nil: no limits
	rpm, tpm float64
	models   map[string]bool // nil: any
	// allowUnseen lets a request whose model cannot be seen past models.
	allowUnseen bool
	mcp         map[string][]string // the MCP servers given, with their tools
	*tenantTally
}

// tenantTally is what a tenant's requests came to, kept apart from the
// tenant so that a reload's tenant of the same name and period goes on
// counting where it left off (reload.go).
type tenantTally struct {
	requests, answered, failed atomic.Int64
	toolCalls                  atomic.Int64 // MCP tools/calls admitted (serveMCP)
	refused                    [numRefusals]atomic.Int64

	mu          sync.Mutex // guards the spend and tokens below
	periodStart time.Time  // of spent
	spent       float64    // what this process settled in the current period
	spentTotal  float64    // what this process settled since it started
	tokens      tokenTally // what the answers reported since the process started
}

// newTenants returns the tenants of o's config, with the door's tokens;
// nil when the config has neither tenants nor prices.
func newTenants(o Options, getenv func(string) string) (*tenants, []string, error) {
	c := o.Config
	if c == nil || len(c.Tenants) == 0 && len(c.Prices) == 0 {
		return nil, o.Tokens, nil
	}
	ts := &tenants{prices: c.Prices}
	defaults := map[string]bool{}
	for _, tok := range o.Tokens {
		if tok = strings.TrimSpace(tok); tok != "" {
			defaults[tok] = true
		}
	}
	add := func(tok string, t *tenant) {
		ts.tokens, ts.byToken = append(ts.tokens, tok), append(ts.byToken, t)
	}
	if len(c.Tenants) == 0 {
		for _, tok := range o.Tokens {
			add(tok, nil)
		}
		return ts, ts.tokens, nil
	}
	configured := c.Tenants
	if _, ok := configured[DefaultTenant]; !ok && len(defaults) > 0 {
		configured = maps.Clone(configured)
		configured[DefaultTenant] = TenantConfig{}
	}
	for _, name := range slices.Sorted(maps.Keys(configured)) {
		tc, where := configured[name], "tenants."+name
		t := &tenant{name: name, rpm: tc.RequestsPerMinute, tpm: tc.TokensPerMinute, allowUnseen: tc.AllowUnseenModels, mcp: tc.MCP, tenantTally: &tenantTally{}}
		if len(tc.Models) > 0 {
			t.models = map[string]bool{}
			for _, m := range tc.Models {
				t.models[m] = true
			}
		}
		if tc.SpendCapUSD != nil {
			t.capUSD, t.period = *tc.SpendCapUSD, cmp.Or(tc.Period, PeriodDay)
			if o.TenantCap != nil {
				t.cap = o.TenantCap(name, t.capUSD, t.period)
			} else {
				t.cap = &periodCap{name: name, usd: t.capUSD, period: t.period}
			}
		}
		if t.rpm > 0 || t.tpm > 0 {
			cfg := ratelimit.Config{RequestsPerMinute: t.rpm, TokensPerMinute: t.tpm}
			if o.TenantLimiter != nil {
				t.pacer = o.TenantLimiter(name, cfg)
			} else {
				t.pacer = ratelimit.New(cfg)
			}
		}
		ts.list = append(ts.list, t)
		own := tokensIn(getenv(tc.TokensEnv))
		if tc.TokensEnv != "" && len(own) == 0 {
			return nil, nil, configErr(where+".tokens_env", "environment variable %s is not set or holds no token", tc.TokensEnv)
		}
		for _, tok := range own {
			if defaults[tok] && name != DefaultTenant {
				return nil, nil, configErr(where+".tokens_env", "a token in %s is also one of --token-env's, the tenant %q's", tc.TokensEnv, DefaultTenant)
			}
			add(tok, t)
		}
		if name == DefaultTenant {
			if len(defaults) == 0 && len(own) == 0 {
				return nil, nil, configErr(where, "no tokens: give tokens_env, or --token-env")
			}
			for _, tok := range o.Tokens {
				add(tok, t)
			}
		}
	}
	return ts, ts.tokens, nil
}

// of returns the tenant of the door's token index i.
func (ts *tenants) of(i int) *tenant {
	if ts == nil || i < 0 || i >= len(ts.byToken) {
		return nil
	}
	return ts.byToken[i]
}

// tenantOf returns the tenant of r's client token, and whether r may go
// on: with client tokens, r must carry one.
func (p *Proxy) tenantOf(r *http.Request) (*tenant, bool) {
	if !p.door.HasTokens() {
		return nil, true
	}
	i, ok := p.door.Match(r)
	if !ok {
		return nil, false
	}
	return p.tenants.of(i), true
}
