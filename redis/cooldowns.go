package reboundredis

import (
	"context"
	"time"

	"github.com/rebound-go/rebound/fallback"
	"github.com/redis/go-redis/v9"
)

// Cooldowns is fallback.Cooldowns shared on Redis: a target one replica's
// chain found out of quota is skipped by every replica's chain, for the
// cool-down, from their next call. Set it as fallback.Chain.Cooldowns. It
// is safe for concurrent use. Make one with NewCooldowns.
//
// A cool-down is a key that expires when it ends, by the Redis server's
// clock. Asking is one round trip, unless this replica already knows the
// target is cooling down: it keeps the cool-downs it starts and learns in
// memory, by the chain's clock, and answers from there without asking.
// While Redis is away, that memory alone answers.
type Cooldowns struct {
	store *Store
	known fallback.MemoryCooldowns // started here or learnt from Redis
}

// NewCooldowns returns Cooldowns on s. It panics if s is nil, a mistake in
// the program rather than a state of Redis.
func NewCooldowns(s *Store) *Cooldowns {
	if s == nil {
		panic("reboundredis: NewCooldowns: the Store is nil")
	}
	return &Cooldowns{store: s}
}

var (
	startCooldown = redis.NewScript(`return redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])`)
	// cooldownLeft answers how many ms the cool-down has left, or a
	// negative number if there is none.
	cooldownLeft = redis.NewScript(`return redis.call('PTTL', KEYS[1])`)
)

// Start makes target cool down for d from now, for every replica.
func (c *Cooldowns) Start(ctx context.Context, target string, now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	c.known.Start(ctx, target, now, d)
	// Failing to share it, this replica still skips the target: a store
	// that is away has said so once already.
	c.store.run(ctx, startCooldown, []string{c.store.key("cooldown", target)}, max(d.Milliseconds(), 1))
}

// Cooling reports whether target is cooling down at now, here or on any
// replica.
func (c *Cooldowns) Cooling(ctx context.Context, target string, now time.Time) bool {
	if c.known.Cooling(ctx, target, now) {
		return true
	}
	res, err := c.store.run(ctx, cooldownLeft, []string{c.store.key("cooldown", target)})
	if err != nil {
		return false
	}
	left, ok := res.(int64)
	if !ok {
		c.store.unreadable(res)
	}
	if left <= 0 {
		return false
	}
	c.known.Start(ctx, target, now, time.Duration(left)*time.Millisecond)
	return true
}
