package proxy

import (
	"cmp"
	"context"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound/cost"
)

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

// settleCall counts c, answered with status, and the tokens its answer
// reported, to its tenant, and prices it from that usage when no cap did.
// c.mu is held.
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
	if c.usage != (cost.Usage{}) {
		t.addTokens(c.usage)
	}
	switch {
	case c.refusal > 0:
		t.refused[c.refusal-1].Add(1)
	case status > 0 && status < http.StatusBadRequest:
		t.answered.Add(1)
	default:
		t.failed.Add(1)
	}
	if corr, ok := t.pacer.(interface{ Correct(estimated, actual int) }); ok && c.usage != (cost.Usage{}) && c.estimate > 0 {
		corr.Correct(c.estimate, int(min(c.usage.InputAll()+c.usage.OutputTokens, math.MaxInt32)))
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
