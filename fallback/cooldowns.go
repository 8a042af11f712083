package fallback

import (
	"context"
	"sync"
	"time"
)

// Cooldowns remembers which targets are cooling down: skipped by a Chain
// without a request, because their quota ran out. A Chain passes the time
// by its call's clock (rebound.WithClock); an implementation may keep time
// by another clock it trusts more, a shared store's, say. It must be safe
// for concurrent use and must not hold a call for long: a store that is
// slow or away should answer from what this process knows.
type Cooldowns interface {
	// Start makes target cool down for d from now.
	Start(ctx context.Context, target string, now time.Time, d time.Duration)
	// Cooling reports whether target is cooling down at now.
	Cooling(ctx context.Context, target string, now time.Time) bool
}

// MemoryCooldowns is Cooldowns in this process's memory. Its zero value
// is ready to use; it is safe for concurrent use.
type MemoryCooldowns struct {
	mu    sync.Mutex           // guards until
	until map[string]time.Time // target → cooling down until
}

// Start makes target cool down until now+d.
func (m *MemoryCooldowns) Start(_ context.Context, target string, now time.Time, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.until == nil {
		m.until = map[string]time.Time{}
	}
	m.until[target] = now.Add(d)
}

// Cooling reports whether target is cooling down at now; a cool-down that
// has ended is forgotten.
func (m *MemoryCooldowns) Cooling(_ context.Context, target string, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	until, ok := m.until[target]
	if ok && !now.Before(until) {
		delete(m.until, target)
		return false
	}
	return ok
}

// coolDown starts the cool-down of the call named key, out of quota at
// now.
func (c *Chain[Req, Resp]) coolDown(ctx context.Context, key string, now time.Time) {
	d := c.QuotaCooldown
	if d <= 0 {
		d = DefaultQuotaCooldown
	}
	c.cooldowns().Start(ctx, key, now, d)
}

// cooldowns returns the chain's Cooldowns, or its own memory.
func (c *Chain[Req, Resp]) cooldowns() Cooldowns {
	if c.Cooldowns != nil {
		return c.Cooldowns
	}
	return &c.own
}
