package proxy

import (
	"context"
	"time"
)

// tenantRow is one tenant as the status page shows it.
type tenantRow struct {
	Name              string
	SpentUSD, CapUSD  float64 // CapUSD: with Resets set, else uncapped
	Period            string  // "day", "month"; "" uncapped
	Resets            time.Time
	Requests, Refused int64
	ToolCalls         int64      // MCP tools/calls admitted, since the process started
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
		row := tenantRow{Name: t.name, CapUSD: t.capUSD, Period: t.period, Requests: t.requests.Load(), ToolCalls: t.toolCalls.Load()}
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
