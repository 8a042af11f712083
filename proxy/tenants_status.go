package proxy

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// tenantRow is one tenant as the status page shows it.
type tenantRow struct {
	Name              string
	SpentUSD, CapUSD  float64 // CapUSD: with Resets set, else uncapped
	Period            string  // "day", "month"; "" uncapped
	Resets            time.Time
	Requests, Refused int64
	Tokens            tokenTally // since the process started
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
		row.SpentUSD, row.Tokens = t.spent, t.tokens
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
// tenants' (requests by outcome, spend, tokens by type, refusals by
// reason), labelled by the tenant's name alone, and the routes' caches'
// (writeCacheMetrics). The request is passed on asking for plain text, so
// that the proxy's own series can follow.
func (p *Proxy) serveMetrics(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	p.writeTenantMetrics(&b)
	p.writeCacheMetrics(&b)
	if b.Len() == 0 {
		p.metrics.ServeHTTP(w, r)
		return
	}
	plain := r.Clone(r.Context())
	plain.Header.Del("Accept-Encoding")
	plain.Header.Set("Accept", "text/plain")
	p.metrics.ServeHTTP(w, plain)
	w.Write([]byte(b.String()))
}

// writeTenantMetrics writes the tenants' series to b, if there are
// tenants.
func (p *Proxy) writeTenantMetrics(b *strings.Builder) {
	if p.tenants == nil || len(p.tenants.list) == 0 {
		return
	}
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
			fmt.Fprintf(b, "rebound_proxy_tenant_requests_total{tenant=%q,outcome=%q} %d\n", t.name, o.name, o.n)
		}
	}
	b.WriteString("# HELP rebound_proxy_tenant_spend_usd_total What each tenant's requests cost, in US dollars, as settled by this process.\n# TYPE rebound_proxy_tenant_spend_usd_total counter\n")
	for _, t := range p.tenants.list {
		t.mu.Lock()
		spent := t.spentTotal
		t.mu.Unlock()
		fmt.Fprintf(b, "rebound_proxy_tenant_spend_usd_total{tenant=%q} %s\n", t.name, strconv.FormatFloat(spent, 'g', -1, 64))
	}
	b.WriteString("# HELP rebound_proxy_tenant_tokens_total The tokens the answers to each tenant's requests reported, as settled by this process, by type: input (every input token, as the access log's input_tokens), output, and of the input, cache_read (read from the provider's prompt cache) and cache_write (written into it).\n# TYPE rebound_proxy_tenant_tokens_total counter\n")
	for _, t := range p.tenants.list {
		t.mu.Lock()
		n := t.tokens
		t.mu.Unlock()
		for _, typ := range []struct {
			name string
			n    int64
		}{{"input", n.input}, {"output", n.output}, {"cache_read", n.cacheRead}, {"cache_write", n.cacheWrite}} {
			fmt.Fprintf(b, "rebound_proxy_tenant_tokens_total{tenant=%q,type=%q} %d\n", t.name, typ.name, typ.n)
		}
	}
	b.WriteString("# HELP rebound_proxy_tenant_refusals_total Requests of each tenant refused before they were sent, by reason: spend_cap, rate_limit, model.\n# TYPE rebound_proxy_tenant_refusals_total counter\n")
	for _, t := range p.tenants.list {
		for i := range t.refused {
			fmt.Fprintf(b, "rebound_proxy_tenant_refusals_total{tenant=%q,reason=%q} %d\n", t.name, refusalNames[i], t.refused[i].Load())
		}
	}
}
