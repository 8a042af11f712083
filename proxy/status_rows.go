package proxy

import (
	"slices"
	"strings"
	"time"

	"github.com/rebound-go/rebound/breaker"
)

// tenantRow is what the status page shows of a tenant.
type tenantRow struct {
	Name              string
	SpentUSD, CapUSD  float64 // CapUSD 0 = uncapped
	Period            string
	Resets            time.Time
	Requests, Refused int64
}

// keyRow is what the status page shows of an upstream's key, besides the
// figures of its calls.
type keyRow struct {
	Upstream, Key                    string
	Breaker                          string
	RequestsHeadroom, TokensHeadroom float64
	Known                            bool // the headroom has been learnt from headers
	CoolingUntil                     time.Time
}

// tenantRows returns the tenants for the status page: none, since this
// proxy has no tenants.
func (p *Proxy) tenantRows() []tenantRow { return nil }

// keyRows returns a row per upstream, in name order, for the status page:
// one key each (Key ""), its headroom unknown, its breaker the worst of
// its per-model breakers.
func (p *Proxy) keyRows() []keyRow {
	var rows []keyRow
	seen := map[string]bool{}
	for _, r := range p.routes {
		for _, t := range r.targets {
			if !seen[t.up.name] {
				seen[t.up.name] = true
				rows = append(rows, keyRow{Upstream: t.up.name, Breaker: breaker.Closed.String()})
			}
		}
	}
	slices.SortFunc(rows, func(a, b keyRow) int { return strings.Compare(a.Upstream, b.Upstream) })
	worst := map[string]breaker.State{}
	for key, b := range p.breakers.kept.All() {
		up, _ := splitTarget(key)
		if s := stateOf(b); severity(s) > severity(worst[up]) {
			worst[up] = s
		}
	}
	for i := range rows {
		rows[i].Breaker = worst[rows[i].Upstream].String()
	}
	return rows
}

// stateOf returns b's state: its own, if it can say (breaker.Breaker),
// else open when its latest Allow refused.
func stateOf(b *keptBreaker) breaker.State {
	if s, ok := b.b.(interface{ State() breaker.State }); ok {
		return s.State()
	}
	if b.refusing.Load() {
		return breaker.Open
	}
	return breaker.Closed
}

// severity orders breaker states from the best (closed) to the worst
// (open).
func severity(s breaker.State) int {
	switch s {
	case breaker.Open:
		return 2
	case breaker.HalfOpen:
		return 1
	}
	return 0
}

// splitTarget returns the upstream and key of a breaker's (and an
// event's) target: "UPSTREAM:MODEL", or "UPSTREAM/KEYVAR:MODEL" for a key
// of a pool.
func splitTarget(target string) (upstream, key string) {
	name, _, _ := strings.Cut(target, ":")
	upstream, key, _ = strings.Cut(name, "/")
	return upstream, key
}
