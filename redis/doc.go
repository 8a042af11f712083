// Package reboundredis shares rebound's state between the replicas of an
// agent service on Redis, so that they behave as one client of a provider:
// one pace under its requests- and tokens-per-minute limits, one view of
// its health, one memory of which targets are out of quota and of which
// tool calls already ran.
//
// Each part is a drop-in for an in-memory one: a Limiter for
// ratelimit.Transport, a Breaker for rebound.Policy, Cooldowns for
// fallback.Chain, Records for tool.Registry, a Cap (a spend cap per
// tenant and day or month) for cost.WithCaps. Every decision is one round
// trip to Redis (a Lua script, timed by the Redis server's clock, so the
// replicas' clocks may disagree), bounded by Config.Timeout, a few
// milliseconds by default.
//
// A call is never held hostage by the store: no decision waits for Redis
// longer than Config.Timeout. When Redis does not answer in
// time, the part decides on local, in-memory state, exactly as the
// in-memory part would; Config.OnChange hears once that Redis went away and
// once that it is back. While it is away, decisions stay local without
// trying it, except one every Config.RetryEvery, which brings the shared
// state back as soon as Redis answers.
//
// Keys start with Config.Prefix, so that services sharing a Redis keep
// apart; every key expires by itself, so a part that stops leaves nothing
// behind for long.
package reboundredis
