// Package reboundredis shares rebound's state between the replicas of an
// agent service on Redis, so that they behave as one client of a provider:
// one pace under its requests- and tokens-per-minute limits, one view of
// its health, one memory of which targets are out of quota and of which
// tool calls already ran, one store of the answers kept for when the
// providers fail.
//
// Each part is a drop-in for an in-memory one: a Limiter for
// ratelimit.Transport, a Breaker for rebound.Policy, Cooldowns for
// fallback.Chain, Records for tool.Registry, a Cap (a spend cap per
// tenant and day or month) for cost.WithCaps, a Cache (a cache.Store) for
// cache.New. Every decision is one round trip to Redis (a Lua script,
// timed by the Redis server's clock, so the replicas' clocks may
// disagree), bounded by Config.Timeout, a few milliseconds by default.
//
// A call is never held hostage by the store: no decision waits for Redis
// longer than Config.Timeout. When Redis does not answer in time, or
// answers with an error rather than a decision (a key of another type
// where one of this package's keys lives, a script it will not run, a
// Redis out of memory or read-only), Redis is away: the part decides on
// local, in-memory state, exactly as the in-memory part would (the Cache,
// which keeps no answers in memory, keeps and serves none meanwhile);
// Config.OnChange hears once that Redis went away, and why, and once that
// it is back; Store.Stats counts the round trips that gave no decision.
// While it is away, decisions stay local without trying it, except one
// every Config.RetryEvery, which brings the shared state back as soon as
// Redis answers.
//
// Keys start with Config.Prefix, so that services sharing a Redis keep
// apart; every key expires by itself, so a part that stops leaves nothing
// behind for long. The keys one decision touches (a Breaker's three, a
// Cap's period's two) share a Redis Cluster hash tag made from the name:
// {name}, with "{", "}" and "%" in the name escaped as %7B, %7D and %25,
// and -{-} for the empty name, so that no name can split them over slots.
package reboundredis
