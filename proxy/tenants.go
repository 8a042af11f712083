package proxy

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
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
	maxMillionUSD  = 1e6 // a price per million tokens
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
	// gets a 403 in its dialect. A request that names no model (a list of
	// models) passes. Empty means any.
	Models []string `json:"models"`
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
		case !(p.InputPerMillion >= 0 && p.InputPerMillion <= maxMillionUSD),
			!(p.OutputPerMillion >= 0 && p.OutputPerMillion <= maxMillionUSD):
			return configErr(where, "a price per million tokens is negative or above $%g", float64(maxMillionUSD))
		case p.MaxOutputTokens < 0 || p.MaxInputTokens < 0:
			return configErr(where, "a token count is negative")
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
	*tenantTally
}

// tenantTally is what a tenant's requests came to, kept apart from the
// tenant so that a reload's tenant of the same name and period goes on
// counting where it left off (reload.go).
type tenantTally struct {
	requests, answered, failed atomic.Int64
	refused                    [numRefusals]atomic.Int64

	mu          sync.Mutex // guards the spend below
	periodStart time.Time  // of spent
	spent       float64    // what this process settled in the current period
	spentTotal  float64    // what this process settled since it started
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
		t := &tenant{name: name, rpm: tc.RequestsPerMinute, tpm: tc.TokensPerMinute, tenantTally: &tenantTally{}}
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

// admitTenant holds c's request to its tenant's models and rate limits,
// and returns the context it goes on with, which keeps its attempts to
// the tenant's spend cap; ok is false when the request was refused (the
// refusal written to w).
func (p *Proxy) admitTenant(w http.ResponseWriter, r *http.Request, c *call) (ctx context.Context, ok bool) {
	ctx = r.Context()
	t := c.tenant
	if t == nil {
		return ctx, true
	}
	if t.models != nil && c.model != "" && !t.models[c.model] {
		writeError(w, c.dialect, http.StatusForbidden, fmt.Sprintf("tenant %q may not use model %q", t.name, c.model))
		c.refuse(refusedModel)
		return ctx, false
	}
	if t.pacer != nil {
		c.estimate = max(len(c.body.b)/4, 1)
		wctx, cancel := context.WithTimeout(ctx, TenantMaxWait)
		err := t.pacer.Wait(wctx, c.estimate)
		cancel()
		if ctx.Err() != nil {
			c.outcome, c.err = "client_gone", ctx.Err()
			return ctx, false
		}
		if err != nil {
			secs := t.retryAfter(c.estimate)
			w.Header().Set("Retry-After", strconv.Itoa(secs))
			writeRateError(w, c.dialect, fmt.Sprintf("tenant %q is over its rate limit (%s); try again in %d s", t.name, t.limits(), secs))
			c.refuse(refusedRateLimit)
			return ctx, false
		}
	}
	if t.cap != nil {
		ctx = cost.WithCaps(ctx, p.tenants.prices, tenantCap{t: t})
	}
	return ctx, true
}

// refuse notes that c was refused for why.
func (c *call) refuse(why refusal) {
	c.refusal = why + 1
	c.outcome = "tenant_" + refusalNames[why]
}

// limits says t's rate limits.
func (t *tenant) limits() string {
	var parts []string
	if t.rpm > 0 {
		parts = append(parts, fmt.Sprintf("%g requests a minute", t.rpm))
	}
	if t.tpm > 0 {
		parts = append(parts, fmt.Sprintf("%g tokens a minute", t.tpm))
	}
	return strings.Join(parts, ", ")
}

// retryAfter is the whole seconds after which a request of tokens
// refused by t's limits may fit them: a request's interval at the pace
// of each limit, from 1 to 60.
func (t *tenant) retryAfter(tokens int) int {
	secs := 1.0
	if t.rpm > 0 {
		secs = max(secs, 60/t.rpm)
	}
	if t.tpm > 0 {
		secs = max(secs, float64(tokens)*60/t.tpm)
	}
	return int(math.Ceil(min(secs, 60)))
}

// refuseSpend answers c's request refused by its tenant's spend cap: the
// dialect's own quota error, with x-should-retry: false (the official
// SDKs then do not retry it), naming the cap and when it resets.
func (p *Proxy) refuseSpend(w http.ResponseWriter, c *call, e *cost.CapError) {
	c.refuse(refusedSpendCap)
	name, period := e.Cap, PeriodDay
	if t := c.tenant; t != nil {
		name, period = t.name, t.period
	}
	msg := fmt.Sprintf("You exceeded your current quota: tenant %q's spend cap of $%g a %s (UTC) would be passed ($%.6f spent or held, this request may cost $%.6f); it resets at %s",
		name, e.Limit, period, e.Spent+e.Held, e.Need, periodEnd(time.Now(), period).Format(time.RFC3339))
	writeQuotaError(w, c.dialect, msg)
}

// writeQuotaError writes the dialect's own error for an exhausted quota,
// which rebound and the official SDKs never retry: OpenAI's 429
// insufficient_quota, Anthropic's 402 billing_error, Gemini's 429
// RESOURCE_EXHAUSTED (whose message says the quota was exceeded).
func writeQuotaError(w http.ResponseWriter, dialect, msg string) {
	w.Header().Set("X-Should-Retry", "false")
	q := strconv.Quote(msg)
	switch dialect {
	case DialectAnthropic:
		writeJSON(w, http.StatusPaymentRequired, `{"type":"error","error":{"type":"billing_error","message":`+q+`}}`)
	case DialectGemini:
		writeJSON(w, http.StatusTooManyRequests, `{"error":{"code":429,"message":`+q+`,"status":"RESOURCE_EXHAUSTED"}}`)
	default:
		writeJSON(w, http.StatusTooManyRequests, `{"error":{"message":`+q+`,"type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`)
	}
}

// writeRateError writes the dialect's own 429 for a rate limit.
func writeRateError(w http.ResponseWriter, dialect, msg string) {
	q := strconv.Quote(msg)
	switch dialect {
	case DialectAnthropic:
		writeJSON(w, http.StatusTooManyRequests, `{"type":"error","error":{"type":"rate_limit_error","message":`+q+`}}`)
	case DialectGemini:
		writeJSON(w, http.StatusTooManyRequests, `{"error":{"code":429,"message":`+q+`,"status":"RESOURCE_EXHAUSTED"}}`)
	default:
		writeJSON(w, http.StatusTooManyRequests, `{"error":{"message":`+q+`,"type":"requests","param":null,"code":"rate_limit_exceeded"}}`)
	}
}

// periodStart returns when the period ("day" or "month", UTC) holding
// now began.
func periodStart(now time.Time, period string) time.Time {
	y, m, d := now.UTC().Date()
	if period == PeriodMonth {
		d = 1
	}
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// periodEnd returns when the period holding now ends: when its cap
// resets.
func periodEnd(now time.Time, period string) time.Time {
	start := periodStart(now, period)
	if period == PeriodMonth {
		return start.AddDate(0, 1, 0)
	}
	return start.AddDate(0, 0, 1)
}

// periodCap is a tenant's spend cap in memory: a cost.Limit for each
// period, a new one when the period turns.
type periodCap struct {
	name   string
	usd    float64
	period string

	mu    sync.Mutex // guards start and limit
	start time.Time
	limit *cost.Limit
}

// Reserve reserves usd on the current period's Limit; a hold of an
// earlier period settles on that period's.
func (pc *periodCap) Reserve(ctx context.Context, usd float64) (cost.Hold, error) {
	pc.mu.Lock()
	if start := periodStart(time.Now(), pc.period); pc.limit == nil || !start.Equal(pc.start) {
		pc.start, pc.limit = start, &cost.Limit{Name: pc.name, USD: pc.usd}
	}
	l := pc.limit
	pc.mu.Unlock()
	return l.Reserve(ctx, usd)
}

// tenantCap is a tenant's cap as its calls' WithCaps holds it: each
// settle is also counted to the tenant and to the call.
type tenantCap struct{ t *tenant }

func (tc tenantCap) Reserve(ctx context.Context, usd float64) (cost.Hold, error) {
	h, err := tc.t.cap.Reserve(ctx, usd)
	if err != nil {
		return nil, err
	}
	c, _ := ctx.Value(callKey{}).(*call)
	return &tenantHold{hold: h, t: tc.t, c: c}, nil
}

type tenantHold struct {
	hold cost.Hold
	t    *tenant
	c    *call
}

func (h *tenantHold) Settle(usd float64) {
	h.hold.Settle(usd)
	usd = max(usd, 0)
	h.t.addSpend(usd)
	if h.c != nil {
		h.c.addCost(usd)
	}
}

// addCost adds usd to what c cost.
func (c *call) addCost(usd float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.costUSD, c.priced = c.costUSD+usd, true
}

// addSpend counts usd to t's spend, in the current period.
func (t *tenant) addSpend(usd float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rollPeriod(time.Now())
	t.spent += usd
	t.spentTotal += usd
}

// rollPeriod starts a new period's spend once the one of t.spent ended.
// t.mu is held.
func (t *tenant) rollPeriod(now time.Time) {
	if start := periodStart(now, cmp.Or(t.period, PeriodDay)); !start.Equal(t.periodStart) {
		t.periodStart, t.spent = start, 0
	}
}

// settleCall counts c, answered with status, to its tenant, and prices it
// from the usage its answer reported when no cap did. c.mu is held.
func (p *Proxy) settleCall(c *call, status int) {
	if p.tenants == nil {
		return
	}
	if !c.priced && c.usage != (cost.Usage{}) && status < http.StatusBadRequest {
		if price, ok := p.tenants.prices[c.answeredModel()]; ok {
			c.costUSD, c.priced = max(price.Of(c.usage), 0), true
			if c.tenant != nil {
				c.tenant.addSpend(c.costUSD)
			}
		}
	}
	t := c.tenant
	if t == nil {
		return
	}
	t.requests.Add(1)
	switch {
	case c.refusal > 0:
		t.refused[c.refusal-1].Add(1)
	case status > 0 && status < http.StatusBadRequest:
		t.answered.Add(1)
	default:
		t.failed.Add(1)
	}
	if corr, ok := t.pacer.(interface{ Correct(estimated, actual int) }); ok && c.usage != (cost.Usage{}) && c.estimate > 0 {
		corr.Correct(c.estimate, int(min(c.usage.InputTokens+c.usage.OutputTokens, math.MaxInt32)))
	}
}

// answeredModel is the model c's answer came from: the one its last
// upstream was asked for (a fallback's may be another), or the client's
// when the route names that upstream more than once.
func (c *call) answeredModel() string {
	model, found := c.model, false
	if c.rt == nil {
		return model
	}
	for _, t := range c.rt.targets {
		if t.up.name != c.upstream {
			continue
		}
		if found {
			return c.model
		}
		model, found = t.modelFor(c), true
	}
	return model
}

// tenantAttrs are the access log's keys of c's tenant and cost. c.mu is
// held.
func (c *call) tenantAttrs(add func(key string, v any)) {
	if c.tenant != nil {
		add("tenant", c.tenant.name)
		if c.tenant.cap != nil {
			add("tenant_cap_usd", c.tenant.capUSD)
		}
	}
	if c.priced {
		add("cost_usd", c.costUSD)
	}
}

// tenantRow is one tenant as the status page shows it.
type tenantRow struct {
	Name              string
	SpentUSD, CapUSD  float64 // CapUSD: with Resets set, else uncapped
	Period            string  // "day", "month"; "" uncapped
	Resets            time.Time
	Requests, Refused int64
}

// spendReader is a cap that knows the current period's settled spend of
// every replica sharing it, as reboundredis.Cap does.
type spendReader interface {
	Spent(ctx context.Context) (float64, error)
}

// tenantRows returns the tenants' spend in the current period, caps and
// requests, by name. The spend of a tenant whose cap is a spendReader is
// the cap's (with --redis, every replica's, or the local view while Redis
// is away), and never less than what this process settled: a Redis that
// forgot the period shows no less than that. Otherwise it is what this
// process settled.
func (p *Proxy) tenantRows(ctx context.Context) []tenantRow {
	if p.tenants == nil {
		return nil
	}
	now := time.Now()
	rows := make([]tenantRow, 0, len(p.tenants.list))
	for _, t := range p.tenants.list {
		row := tenantRow{Name: t.name, CapUSD: t.capUSD, Period: t.period, Requests: t.requests.Load()}
		for i := range t.refused {
			row.Refused += t.refused[i].Load()
		}
		if t.cap != nil {
			row.Resets = periodEnd(now, t.period)
		}
		t.mu.Lock()
		t.rollPeriod(now)
		row.SpentUSD = t.spent
		t.mu.Unlock()
		if sr, ok := t.cap.(spendReader); ok {
			// An error leaves the cap's local view, still its best figure.
			usd, _ := sr.Spent(ctx)
			row.SpentUSD = max(row.SpentUSD, usd)
		}
		rows = append(rows, row)
	}
	return rows
}

// serveMetrics serves /metrics: Options.Metrics' series, then the
// tenants' (requests by outcome, spend, refusals by reason), labelled
// by the tenant's name alone. The request is passed on asking for plain
// text, so that the tenants' series can follow.
func (p *Proxy) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if p.tenants == nil || len(p.tenants.list) == 0 {
		p.metrics.ServeHTTP(w, r)
		return
	}
	plain := r.Clone(r.Context())
	plain.Header.Del("Accept-Encoding")
	plain.Header.Set("Accept", "text/plain")
	p.metrics.ServeHTTP(w, plain)
	var b strings.Builder
	b.WriteString("# HELP rebound_proxy_tenant_requests_total Requests of each tenant, by outcome: answered (a status under 400), failed, or refused by the tenant's cap, limits or models.\n# TYPE rebound_proxy_tenant_requests_total counter\n")
	for _, t := range p.tenants.list {
		var refused int64
		for i := range t.refused {
			refused += t.refused[i].Load()
		}
		for _, o := range []struct {
			name string
			n    int64
		}{{"answered", t.answered.Load()}, {"failed", t.failed.Load()}, {"refused", refused}} {
			fmt.Fprintf(&b, "rebound_proxy_tenant_requests_total{tenant=%q,outcome=%q} %d\n", t.name, o.name, o.n)
		}
	}
	b.WriteString("# HELP rebound_proxy_tenant_spend_usd_total What each tenant's requests cost, in US dollars, as settled by this process.\n# TYPE rebound_proxy_tenant_spend_usd_total counter\n")
	for _, t := range p.tenants.list {
		t.mu.Lock()
		spent := t.spentTotal
		t.mu.Unlock()
		fmt.Fprintf(&b, "rebound_proxy_tenant_spend_usd_total{tenant=%q} %s\n", t.name, strconv.FormatFloat(spent, 'g', -1, 64))
	}
	b.WriteString("# HELP rebound_proxy_tenant_refusals_total Requests of each tenant refused before they were sent, by reason: spend_cap, rate_limit, model.\n# TYPE rebound_proxy_tenant_refusals_total counter\n")
	for _, t := range p.tenants.list {
		for i := range t.refused {
			fmt.Fprintf(&b, "rebound_proxy_tenant_refusals_total{tenant=%q,reason=%q} %d\n", t.name, refusalNames[i], t.refused[i].Load())
		}
	}
	w.Write([]byte(b.String()))
}
