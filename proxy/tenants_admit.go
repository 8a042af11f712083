package proxy

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/cost"
)

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
	if msg := t.modelRefusal(c); msg != "" {
		writeError(w, c.dialect, http.StatusForbidden, msg)
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

// modelRefusal says why t may not send c's request for the models it
// runs; "" if it may.
func (t *tenant) modelRefusal(c *call) string {
	if t.models == nil {
		return ""
	}
	for _, m := range append([]string{c.model}, c.batchModels...) {
		if m != "" && !t.models[m] {
			return fmt.Sprintf("tenant %q may not use model %q", t.name, m)
		}
	}
	if c.unseenModel && !t.allowUnseen {
		return fmt.Sprintf("tenant %q may use only the models it lists, and the proxy cannot see which model this request runs (a batch over a file, a stored prompt, a form, a compressed body); the tenant's allow_unseen_models lets it", t.name)
	}
	return ""
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
