package proxy

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rebound-go/rebound/cost"
)

// ErrNoConfig is Reload's error for a Proxy made without a config (with
// Options.Upstream): there is no config to replace.
var ErrNoConfig = errors.New("the proxy has no config to reload: it was made with an upstream URL, not a config")

// ConfigVersion returns the version of a config file's bytes: the first 12
// hex digits of their SHA-256. ParseConfig sets it as FileConfig.Version.
func ConfigVersion(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// versionOf returns what the status page shows of c's version: the version
// and when it was loaded; "" for none.
func versionOf(c *FileConfig) string {
	if c == nil || c.Version == "" {
		return ""
	}
	return c.Version + ", loaded " + time.Now().UTC().Format(time.RFC3339)
}

// Reload returns a Proxy for the config c, made with p's other Options,
// that keeps p's state of every upstream, key and tenant that c keeps, or
// a one-line error (p goes on unchanged). Serve the new Proxy in p's
// place: requests p is serving finish on p, with the config they started
// with, and count to the same tallies.
//
// What carries over, for a thing of the same name in c:
//   - an upstream's or pool key's pace (the limits learnt from its
//     headers), adaptive limit on requests in flight, retry budget and
//     breakers, when its URL, dialect, key and configured limits are
//     unchanged (else it is another endpoint, and starts fresh); its
//     quota cool-down, kept by name in Options.Cooldowns, in any case;
//   - a tenant's requests, refusals and spend; its spend cap when its
//     amount and period are unchanged (a changed amount starts from the
//     spend so far this period, a request in flight counted at the most
//     it could cost, so that a reload is no way to spend more); its rate
//     limits' state when its limits are unchanged;
//   - a route's response cache (its answers and figures), when its cache
//     config is unchanged;
//   - the status page's figures, and the body memory in use;
//   - an MCP server's handler, when its config is unchanged (one removed
//     or changed is closed by CloseReplaced, one added is made).
//
// An upstream, key or tenant that c removes goes (requests p is serving
// still use it); one that c adds starts fresh. Tokens, flags and other
// Options are p's: only the config changes. Reload the Proxy being
// served: a Proxy that was replaced already would hand on its state
// again, and the two reloads would share it.
func (p *Proxy) Reload(c *FileConfig) (*Proxy, error) {
	if p.made.Config == nil {
		return nil, ErrNoConfig
	}
	if c == nil {
		return nil, errors.New("config: none given")
	}
	o := p.made
	o.Config, o.Base = c, p.base
	return build(o, p)
}

// ConfigVersion returns the version of p's config (FileConfig.Version);
// "" for none.
func (p *Proxy) ConfigVersion() string {
	if p.made.Config == nil {
		return ""
	}
	return p.made.Config.Version
}

// handOver gives q, a Proxy being built for another config, p's state of
// the upstreams, keys and tenants that q keeps: q's routes are set, and q
// is not yet serving.
func (p *Proxy) handOver(q *Proxy) {
	q.cooldowns = p.ownCooldowns
	kept := p.handOverUpstreams(q)
	// A breaker's key is "UPSTREAM:MODEL" or "UPSTREAM/KEYVAR:MODEL":
	// those of a kept upstream go on, oldest first so that their order
	// of use stays.
	type held struct {
		key string
		b   *keptBreaker
	}
	var breakers []held
	for key, b := range p.breakers.kept.All() {
		if name, _, _ := strings.Cut(key, ":"); kept[name] {
			breakers = append(breakers, held{key, b})
		}
	}
	for _, h := range slices.Backward(breakers) {
		q.breakers.kept.Get(h.key, func() *keptBreaker { return h.b })
	}
	p.handOverTenants(q)
	p.handOverCaches(q)
	if p.draining.Load() {
		q.draining.Store(true)
	}
}

// handOverUpstreams puts in q's routes p's upstream of each name whose
// settings q's config keeps, and returns the names of those kept.
func (p *Proxy) handOverUpstreams(q *Proxy) map[string]bool {
	old := map[string]*upstream{}
	for _, r := range p.routes {
		for _, t := range r.targets {
			old[t.up.name] = t.up
		}
	}
	chosen := map[*upstream]*upstream{} // q's upstream -> the one it uses
	kept := map[string]bool{}
	for _, r := range q.routes {
		for _, t := range r.targets {
			if _, ok := chosen[t.up]; ok {
				continue
			}
			chosen[t.up] = t.up
			switch o := old[t.up.name]; {
			case o != nil && sameUpstream(o, t.up):
				chosen[t.up], kept[o.name] = o, true
			case o != nil:
				// The cool-downs are kept by name: one under way goes on
				// for the new endpoint too, and the status page says so.
				t.up.coolingUntil.Store(o.coolingUntil.Load())
			}
		}
	}
	// A pool's keys share a retry budget: a key added joins the budget of
	// the keys kept.
	budgets := map[string]*upstream{}
	for _, up := range chosen {
		if up.pool != "" && kept[up.name] {
			budgets[up.pool] = up
		}
	}
	for fresh, up := range chosen {
		if k := budgets[up.pool]; up == fresh && k != nil {
			fresh.budget = k.budget
		}
	}
	for _, r := range q.routes {
		for i := range r.targets {
			r.targets[i].up = chosen[r.targets[i].up]
		}
	}
	return kept
}

// sameUpstream says that a and b are one endpoint, key and limits: the
// state of one is the other's.
func sameUpstream(a, b *upstream) bool {
	return a.name == b.name && a.base.String() == b.base.String() && a.dialect == b.dialect &&
		a.key == b.key && a.limits == b.limits && a.pool == b.pool && a.keyVar == b.keyVar
}

// handOverTenants gives q's tenants the state of p's tenants of the same
// name.
func (p *Proxy) handOverTenants(q *Proxy) {
	if p.tenants == nil || q.tenants == nil {
		return
	}
	old := map[string]*tenant{}
	for _, t := range p.tenants.list {
		old[t.name] = t
	}
	for _, t := range q.tenants.list {
		o := old[t.name]
		if o == nil {
			continue
		}
		samePeriod := cmp.Or(o.period, PeriodDay) == cmp.Or(t.period, PeriodDay)
		if samePeriod {
			t.tenantTally = o.tenantTally
		} else {
			t.carryCounts(o)
		}
		switch {
		case o.cap != nil && t.cap != nil && o.capUSD == t.capUSD && o.period == t.period:
			t.cap = o.cap
		case samePeriod:
			carrySpend(o, t.cap)
		}
		if o.pacer != nil && t.pacer != nil && o.rpm == t.rpm && o.tpm == t.tpm {
			t.pacer = o.pacer
		}
	}
}

// carryCounts starts t's counts from o's, a tenant of another period: its
// spend in a period t does not have is not carried.
func (t *tenant) carryCounts(o *tenant) {
	t.requests.Store(o.requests.Load())
	t.answered.Store(o.answered.Load())
	t.failed.Store(o.failed.Load())
	for i := range t.refused {
		t.refused[i].Store(o.refused[i].Load())
	}
	o.mu.Lock()
	total := o.spentTotal
	o.mu.Unlock()
	t.spentTotal = total
}

// carrySpend starts to, a new in-memory cap of the period of o's spend,
// from what o spent in the current period (by its caps, or priced
// uncapped) and what its requests in flight are held at on its old cap:
// they settle there, so the new cap counts them at the most they could
// cost. Caps kept elsewhere (on Redis, under the tenant's name) carry
// their spend themselves.
func carrySpend(o *tenant, to cost.Cap) {
	t, ok := to.(*periodCap)
	if !ok {
		return
	}
	now := time.Now()
	held := 0.0
	if old, ok := o.cap.(*periodCap); ok {
		old.mu.Lock()
		if old.limit != nil && old.start.Equal(periodStart(now, t.period)) {
			held = old.limit.Held()
		}
		old.mu.Unlock()
	}
	o.mu.Lock()
	o.rollPeriod(now)
	spent := o.spent + held
	o.mu.Unlock()
	// Settle the spend on a Limit not yet in use, whatever its cap, then
	// set the cap: nothing else holds it yet.
	l := &cost.Limit{Name: t.name, USD: math.MaxFloat64}
	if h, err := l.Reserve(context.Background(), 0); err == nil {
		h.Settle(spent)
	}
	l.USD = t.usd
	t.start, t.limit = periodStart(now, t.period), l
}

// handOverTallies gives q, built for another config, p's body memory (its
// bound is p's: only the config changed) and the status page's figures,
// without the rows of the keys q's config removes.
func (p *Proxy) handOverTallies(q *Proxy) {
	q.memory = p.memory
	q.board = p.board
	named := map[[2]string]bool{}
	for _, r := range q.routes {
		for _, t := range r.targets {
			named[splitTargetID(t.up.name)] = true
		}
	}
	p.board.mu.Lock()
	defer p.board.mu.Unlock()
	for id := range p.board.rows {
		if !named[id] {
			delete(p.board.rows, id)
		}
	}
}

// splitTargetID returns the status board's id of an upstream's name.
func splitTargetID(name string) [2]string {
	upstream, key := splitTarget(name)
	return [2]string{upstream, key}
}
