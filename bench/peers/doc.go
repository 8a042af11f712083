// Package peers benchmarks rebound against the retry libraries Go agents
// use today, in one run, on the same scenarios as rebound's own
// benchmarks. It is a module of its own so that rebound itself depends on
// nothing but the standard library.
//
// Run it from this folder:
//
//	go test -run '^$' -bench . -count 6
//
// The shared limiter's benchmarks (BenchmarkSharedLimit*) compare
// reboundredis.Limiter with go-redis/redis_rate and need a Redis server:
// REBOUND_REDIS_URL names it, else the one on 127.0.0.1:6379.
package peers
