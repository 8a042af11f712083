package proxy

// A Series is one of the proxy's own series on /metrics, beside its
// Observer's: the tenants' and the routes' caches'. The proxy keeps the
// figures; what serves /metrics (the command's OpenTelemetry meter, read
// by Prometheus) reads them through Figures, so that every series comes
// from one exporter. Name is OpenTelemetry's; Prometheus reads a counter
// "rebound.proxy.tenant.requests" as rebound_proxy_tenant_requests_total
// and a gauge "rebound.proxy.cache.entries" as rebound_proxy_cache_entries.
type Series struct {
	Name        string
	Description string
	// Gauge says the figure goes up and down; else it is a counter, which
	// only grows while the process runs.
	Gauge bool
}

// The proxy's own series, in the order Figure.Series names them.
var ProxySeries = []Series{
	{Name: "rebound.proxy.tenant.requests", Description: "Requests of each tenant, by outcome: answered (a status under 400), failed, or refused by the tenant's cap, limits or models."},
	{Name: "rebound.proxy.tenant.spend_usd", Description: "What each tenant's requests cost, in US dollars, as settled by this process."},
	{Name: "rebound.proxy.tenant.tokens", Description: "The tokens the answers to each tenant's requests reported, as settled by this process, by type: input (every input token, as the access log's input_tokens), output, and of the input, cache_read (read from the provider's prompt cache) and cache_write (written into it)."},
	{Name: "rebound.proxy.tenant.refusals", Description: "Requests of each tenant refused before they were sent, by reason: spend_cap, rate_limit, model."},
	{Name: "rebound.proxy.cache.hits", Description: "Answers each route's cache served younger than its ttl, no upstream asked (serve: always)."},
	{Name: "rebound.proxy.cache.stale", Description: "Answers each route's cache served in place of its upstreams' failure."},
	{Name: "rebound.proxy.cache.stored", Description: "Answers each route's cache kept."},
	{Name: "rebound.proxy.cache.entries", Description: "Answers each route's cache holds in this process's memory.", Gauge: true},
	{Name: "rebound.proxy.cache.bytes", Description: "Bytes each route's cache holds in this process's memory.", Gauge: true},
}

// Indexes of ProxySeries.
const (
	seriesTenantRequests = iota
	seriesTenantSpend
	seriesTenantTokens
	seriesTenantRefusals
	seriesCacheHits
	seriesCacheStale
	seriesCacheStored
	seriesCacheEntries
	seriesCacheBytes
)

// A Figure is one value of one of ProxySeries (its index), under its
// labels: the tenant, and its outcome, token type or reason; or the route.
type Figure struct {
	Series int
	Labels []Label
	Value  float64
}

// A Label is one label of a Figure.
type Label struct{ Key, Value string }

// Figures yields p's figures now: each tenant's requests by outcome,
// spend, tokens by type and refusals by reason, labelled by the tenant's
// name alone (never a token); each route's cache's hits, stale answers,
// answers kept, and, when its store can say, its entries and bytes,
// labelled by the route's name.
func (p *Proxy) Figures(yield func(Figure) bool) {
	if p.tenants != nil {
		for _, t := range p.tenants.list {
			if !t.figures(yield) {
				return
			}
		}
	}
	for _, j := range p.cacheRows() {
		route := []Label{{"route", j.Route}}
		figs := []Figure{
			{seriesCacheHits, route, float64(j.Hits)},
			{seriesCacheStale, route, float64(j.Stale)},
			{seriesCacheStored, route, float64(j.Stored)},
		}
		if j.Entries != nil {
			figs = append(figs, Figure{seriesCacheEntries, route, float64(*j.Entries)}, Figure{seriesCacheBytes, route, float64(*j.Bytes)})
		}
		for _, f := range figs {
			if !yield(f) {
				return
			}
		}
	}
}

// figures yields t's figures, and reports whether to go on.
func (t *tenant) figures(yield func(Figure) bool) bool {
	name := Label{"tenant", t.name}
	var refused int64
	for i := range t.refused {
		refused += t.refused[i].Load()
	}
	t.mu.Lock()
	spent, n := t.spentTotal, t.tokens
	t.mu.Unlock()
	figs := []Figure{
		{seriesTenantRequests, []Label{name, {"outcome", "answered"}}, float64(t.answered.Load())},
		{seriesTenantRequests, []Label{name, {"outcome", "failed"}}, float64(t.failed.Load())},
		{seriesTenantRequests, []Label{name, {"outcome", "refused"}}, float64(refused)},
		{seriesTenantSpend, []Label{name}, spent},
		{seriesTenantTokens, []Label{name, {"type", "input"}}, float64(n.input)},
		{seriesTenantTokens, []Label{name, {"type", "output"}}, float64(n.output)},
		{seriesTenantTokens, []Label{name, {"type", "cache_read"}}, float64(n.cacheRead)},
		{seriesTenantTokens, []Label{name, {"type", "cache_write"}}, float64(n.cacheWrite)},
	}
	for i := range t.refused {
		figs = append(figs, Figure{seriesTenantRefusals, []Label{name, {"reason", refusalNames[i]}}, float64(t.refused[i].Load())})
	}
	for _, f := range figs {
		if !yield(f) {
			return false
		}
	}
	return true
}
