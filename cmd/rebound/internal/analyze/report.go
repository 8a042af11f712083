package analyze

import (
	"cmp"
	"encoding/json"
	"math"
	"slices"
	"strconv"

	"github.com/rebound-go/rebound"
)

// baseKey is what a verdict is computed from.
type baseKey struct {
	status  int
	errType string
	errCode string
}

// groupKey names a group. class tells the "ok" and "other" rows apart
// from error rows; kind is the verdict kind plus one (0 for "ok").
type groupKey struct {
	baseKey
	kind  uint8
	class uint8
}

const (
	classError uint8 = iota
	classOK
	classOther
	classRefused // a spend cap refused it: no provider error
)

// group is a row's counters.
type group struct {
	key                         groupKey
	calls, attempts, retried    int64
	succeeded, succAfterRetry   int64
	wastedAttempts, pricedCalls int64
	pricedSucceeded             int64
	cost, wasted, retryFee      float64
}

// add counts c in its group.
func (a *Analyzer) add(c *call) {
	var k groupKey
	switch {
	case c.succeeded && c.status == 0 && c.errType == "" && c.errCode == "" && c.kind == 0:
		k.class = classOK
	case c.refused:
		k.class = classRefused
	default:
		k.baseKey = baseKey{c.status, c.errType, c.errCode}
		k.kind = c.kind
	}
	g := a.group(k)
	g.calls++
	g.attempts += c.attempts
	if c.attempts > 1 {
		g.retried++
	}
	if c.succeeded {
		g.succeeded++
		g.wastedAttempts += c.attempts - 1
		if c.attempts > 1 {
			g.succAfterRetry++
		}
	} else {
		g.wastedAttempts += c.attempts
	}
	if c.priced {
		g.pricedCalls++
		if c.succeeded {
			g.pricedSucceeded++
		}
		g.cost += c.cost
		g.wasted += c.wasted
		g.retryFee += c.retryFee
	}
	a.cache.add(c)
	a.answers.add(c)
	if c.run != "" || c.tenant != "" {
		a.runs.add(c.run, c, c.runCap, a.opts.MaxKeys)
		a.tenants.add(c.tenant, c, c.tenantCap, a.opts.MaxKeys)
	}
}

// group returns the group of k, the "other" group once there are
// MaxGroups others. An error's kind, if rebound did not log it, is computed
// once per (status, type, code): every group of a computed kind has its
// key in a.kinds, so a key missing from it when the groups are full
// can only go to "other", and is not classified at all.
func (a *Analyzer) group(k groupKey) *group {
	full := len(a.groups) >= a.opts.MaxGroups && k.class != classOK && k.class != classRefused // these always have a row
	if k.class == classError && k.kind == 0 {
		kind, ok := a.kinds[k.baseKey]
		switch {
		case ok:
		case full || len(a.kinds) >= a.opts.MaxGroups:
			k = groupKey{class: classOther}
		default:
			kind = Classify(k.status, k.errType, k.errCode)
			a.kinds[k.baseKey] = kind
		}
		if k.class == classError {
			k.kind = uint8(kind) + 1
		}
	}
	if g := a.groups[k]; g != nil {
		return g
	}
	if full {
		k = groupKey{class: classOther}
		if g := a.groups[k]; g != nil {
			return g
		}
	}
	g := &group{key: k}
	a.groups[k] = g
	return g
}

// Classify returns rebound's verdict kind on a failure with HTTP status
// status (0 for none) and a provider error body
// {"error":{"type":errType,"code":errCode}}.
func Classify(status int, errType, errCode string) rebound.Kind {
	var body struct {
		Error struct {
			Type string `json:"type,omitempty"`
			Code string `json:"code,omitempty"`
		} `json:"error"`
	}
	body.Error.Type, body.Error.Code = errType, errCode
	b, _ := json.Marshal(body)
	return rebound.ClassifyResponse(status, nil, b).Kind
}

// Recommendation says what to do about failures of kind k.
func Recommendation(k rebound.Kind) string {
	switch k {
	case rebound.KindTransient:
		return "retry with backoff and jitter"
	case rebound.KindRateLimited:
		return "retry with backoff, honour Retry-After"
	case rebound.KindOverloaded:
		return "retry; fall back on repeat"
	case rebound.KindQuotaExhausted:
		return "never retry; quota does not come back in seconds: fall back or alert"
	case rebound.KindContextOverflow:
		return "never retry; compact or fall back"
	case rebound.KindPermanent:
		return "never retry: fix the request"
	case rebound.KindCanceled:
		return "not a provider failure: check the caller's deadlines"
	}
	return ""
}

// Futile reports whether retrying a failure of kind k can never succeed.
func Futile(k rebound.Kind) bool {
	return k == rebound.KindPermanent || k == rebound.KindQuotaExhausted || k == rebound.KindContextOverflow
}

// Report is the analysis of everything read so far. "rebound help
// analyze" documents its JSON form.
type Report struct {
	Files     []File `json:"files"`
	Lines     int64  `json:"lines"`
	Calls     int64  `json:"calls"`
	Malformed int64  `json:"malformed"`
	Skipped   int64  `json:"skipped"`
	Totals    Totals `json:"totals"`
	Rows      []Row  `json:"rows"`
	// Runs and Tenants are the runs and tenants the calls named, those
	// that passed or came nearest their caps first; left out when no
	// call named one. OtherRuns and OtherTenants count the calls of
	// those past Options.MaxKeys; left out when there were none.
	Runs         []Spend     `json:"runs,omitempty"`
	Tenants      []Spend     `json:"tenants,omitempty"`
	OtherRuns    *OtherSpend `json:"other_runs,omitempty"`
	OtherTenants *OtherSpend `json:"other_tenants,omitempty"`
}

// Totals are the figures of all calls.
type Totals struct {
	Calls               int64    `json:"calls"`
	Succeeded           int64    `json:"succeeded"`
	SuccessRate         float64  `json:"success_rate"`
	Attempts            int64    `json:"attempts"`
	Retries             int64    `json:"retries"`
	CallsRetried        int64    `json:"calls_retried"`
	RetryRate           float64  `json:"retry_rate"`
	SucceededAfterRetry int64    `json:"succeeded_after_retry"`
	WastedAttempts      int64    `json:"wasted_attempts"`
	PricedCalls         int64    `json:"priced_calls"`
	CostUSD             *float64 `json:"cost_usd"`
	WastedUSD           *float64 `json:"wasted_usd"`
	RetryCostUSD        *float64 `json:"retry_cost_usd"`
	// CostPerSuccessUSD is CostUSD over the priced calls that succeeded.
	CostPerSuccessUSD  *float64 `json:"cost_per_success_usd"`
	FutileRetries      int64    `json:"futile_retries"`
	FutileRetryCostUSD *float64 `json:"futile_retry_cost_usd"`
	// InputTokens is the input the calls logged (input_tokens, an
	// attempt's each); CacheReadTokens and CacheWriteTokens are the parts
	// of it read from the provider's prompt cache and written into it.
	// They stop at the largest int64 rather than wrap.
	InputTokens      int64 `json:"input_tokens"`
	CacheReadTokens  int64 `json:"cache_read_tokens"`
	CacheWriteTokens int64 `json:"cache_write_tokens"`
	// CacheReadShare is CacheReadTokens / InputTokens; null without input.
	CacheReadShare *float64 `json:"cache_read_share"`
	// CacheSavedUSD is what the input read from and written into the
	// cache would have cost at the input price, every attempt's, less what
	// it cost at the cache's prices (Options.PriceCacheRead and
	// PriceCacheWrite); negative when writes cost more than reads saved.
	// Null without prices, or without a call that logs its input.
	CacheSavedUSD *float64 `json:"cache_saved_usd"`
	// ResponseCacheHits and ResponseCacheStale count the answers rebound
	// proxy served from its response cache ("cache": "hit", no provider
	// asked; "stale", in place of the providers' failure), and
	// ResponseCacheSavedUSD is what they did not cost (their
	// "saved_usd"), null when none logged it.
	ResponseCacheHits     int64    `json:"response_cache_hits"`
	ResponseCacheStale    int64    `json:"response_cache_stale"`
	ResponseCacheSavedUSD *float64 `json:"response_cache_saved_usd"`
}

// answersTally counts the answers served from a response cache.
type answersTally struct {
	hits, stale int64
	saved       float64
	savedKnown  bool
}

// add counts c, if its answer came from a response cache.
func (at *answersTally) add(c *call) {
	switch c.served {
	case servedHit:
		at.hits++
	case servedStale:
		at.stale++
	}
	if c.notCostKnown {
		at.saved, at.savedKnown = at.saved+c.notCost, true
	}
}

// totals fills in t's figures of the response cache.
func (at *answersTally) totals(t *Totals) {
	t.ResponseCacheHits, t.ResponseCacheStale = at.hits, at.stale
	if at.savedKnown {
		t.ResponseCacheSavedUSD = usd(at.saved)
	}
}

// cacheTally adds up what the calls' tokens say of the provider's cache.
type cacheTally struct {
	input, read, write int64 // at most math.MaxInt64
	saved              float64
	savedKnown         bool
}

// add counts c's tokens.
func (ct *cacheTally) add(c *call) {
	if !c.tokened {
		return
	}
	ct.input, ct.read, ct.write = plus(ct.input, c.input), plus(ct.read, c.cacheRead), plus(ct.write, c.cacheWrite)
	if c.savedKnown {
		ct.saved, ct.savedKnown = ct.saved+c.saved, true
	}
}

// plus returns a+b, both at least 0, at most math.MaxInt64.
func plus(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// totals fills in t's figures of the cache.
func (ct *cacheTally) totals(t *Totals) {
	t.InputTokens, t.CacheReadTokens, t.CacheWriteTokens = ct.input, ct.read, ct.write
	if ct.input > 0 {
		share := min(rate(ct.read, ct.input), 1)
		t.CacheReadShare = &share
	}
	if ct.savedKnown {
		t.CacheSavedUSD = usd(ct.saved)
	}
}

// Row is one group of calls.
type Row struct {
	// Group names the row: "ok", "other", "400 context_length_exceeded",
	// "503", "transport error", ...
	Group     string `json:"group"`
	Status    int    `json:"status"`
	ErrorType string `json:"error_type,omitempty"`
	ErrorCode string `json:"error_code,omitempty"`
	// Kind is the verdict kind's name; empty for "ok" and "other".
	Kind                string   `json:"kind,omitempty"`
	Calls               int64    `json:"calls"`
	Attempts            int64    `json:"attempts"`
	Retries             int64    `json:"retries"`
	CallsRetried        int64    `json:"calls_retried"`
	Succeeded           int64    `json:"succeeded"`
	SucceededAfterRetry int64    `json:"succeeded_after_retry"`
	SuccessRate         float64  `json:"success_rate"`
	WastedAttempts      int64    `json:"wasted_attempts"`
	PricedCalls         int64    `json:"priced_calls"`
	CostUSD             *float64 `json:"cost_usd"`
	WastedUSD           *float64 `json:"wasted_usd"`
	RetryCostUSD        *float64 `json:"retry_cost_usd"`
	// Futile is set for a row whose kind can never succeed on a retry
	// and on which retries were spent.
	Futile         bool   `json:"futile"`
	Recommendation string `json:"recommendation"`
}

// Report returns the analysis of everything read so far.
func (a *Analyzer) Report() Report {
	r := Report{Files: slices.Clone(a.files), Rows: make([]Row, 0, len(a.groups))}
	if r.Files == nil {
		r.Files = []File{}
	}
	for _, f := range a.files {
		r.Lines += f.Lines
		r.Calls += f.Calls
		r.Malformed += f.Malformed
		r.Skipped += f.Skipped
	}
	t := &r.Totals
	var cost, wasted, retryFee, futileFee float64
	var futilePriced, pricedSucceeded int64
	for _, g := range a.groups {
		row := g.row()
		r.Rows = append(r.Rows, row)
		t.Calls += g.calls
		t.Succeeded += g.succeeded
		t.Attempts += g.attempts
		t.CallsRetried += g.retried
		t.SucceededAfterRetry += g.succAfterRetry
		t.WastedAttempts += g.wastedAttempts
		t.PricedCalls += g.pricedCalls
		pricedSucceeded += g.pricedSucceeded
		cost += g.cost
		wasted += g.wasted
		retryFee += g.retryFee
		if row.Futile {
			t.FutileRetries += row.Retries
			futileFee += g.retryFee
			futilePriced += g.pricedCalls
		}
	}
	t.Retries = t.Attempts - t.Calls
	t.SuccessRate = rate(t.Succeeded, t.Calls)
	t.RetryRate = rate(t.CallsRetried, t.Calls)
	if t.PricedCalls > 0 {
		t.CostUSD, t.WastedUSD, t.RetryCostUSD = usd(cost), usd(wasted), usd(retryFee)
		if pricedSucceeded > 0 {
			t.CostPerSuccessUSD = usd(cost / float64(pricedSucceeded))
		}
	}
	if futilePriced > 0 {
		t.FutileRetryCostUSD = usd(futileFee)
	}
	a.cache.totals(t)
	a.answers.totals(t)
	slices.SortFunc(r.Rows, func(x, y Row) int {
		return cmp.Or(
			cmp.Compare(deref(y.WastedUSD), deref(x.WastedUSD)),
			cmp.Compare(y.Calls, x.Calls),
			cmp.Compare(x.Group, y.Group),
			cmp.Compare(x.Kind, y.Kind),
			cmp.Compare(x.ErrorType, y.ErrorType),
			cmp.Compare(x.ErrorCode, y.ErrorCode))
	})
	r.Runs, r.OtherRuns = a.runs.report()
	r.Tenants, r.OtherTenants = a.tenants.report()
	return r
}

// row returns g's row.
func (g *group) row() Row {
	k := g.key
	r := Row{
		Status: k.status, ErrorType: k.errType, ErrorCode: k.errCode,
		Calls: g.calls, Attempts: g.attempts, Retries: g.attempts - g.calls,
		CallsRetried: g.retried, Succeeded: g.succeeded, SucceededAfterRetry: g.succAfterRetry,
		SuccessRate: rate(g.succeeded, g.calls), WastedAttempts: g.wastedAttempts,
		PricedCalls: g.pricedCalls,
	}
	if g.pricedCalls > 0 {
		r.CostUSD, r.WastedUSD, r.RetryCostUSD = usd(g.cost), usd(g.wasted), usd(g.retryFee)
	}
	switch k.class {
	case classOK:
		r.Group = "ok"
		return r
	case classOther:
		r.Group = "other"
		return r
	case classRefused:
		r.Group = "refused by a spend cap"
		r.Recommendation = "not a provider error: raise the cap or end the run sooner; retrying spends nothing and gets nothing"
		return r
	}
	kind := rebound.Kind(k.kind - 1)
	r.Kind = kind.String()
	r.Recommendation = Recommendation(kind)
	r.Futile = Futile(kind) && r.Retries > 0
	r.Group = groupName(k.status, k.errType, k.errCode, kind)
	return r
}

// groupName names an error row.
func groupName(status int, errType, errCode string, kind rebound.Kind) string {
	what := errCode
	if what == "" {
		what = errType
	}
	switch {
	case status != 0 && what != "":
		return strconv.Itoa(status) + " " + what
	case status != 0:
		return strconv.Itoa(status)
	case what != "":
		return what
	case kind == rebound.KindCanceled:
		return "canceled"
	}
	return "transport error"
}

func rate(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return round(float64(n)/float64(of), 1e6)
}

// usd rounds a dollar amount to a millionth of a dollar.
func usd(v float64) *float64 {
	v = round(v, 1e6)
	return &v
}

func round(v, unit float64) float64 { return math.Round(v*unit) / unit }

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
