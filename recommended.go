package rebound

import "time"

// Recommended returns the policy rebound recommends for a call to an LLM
// API, and the one its benchmarks call "rebound": three attempts with
// exponential backoff and full jitter for transient failures; more
// patience for rate limits, whose server hints it honours up to a minute;
// one quick retry for an overloaded provider (inside a fallback chain, an
// overload moves to the next target at once instead); at most 30 s of
// waiting in all. Exhausted quotas, oversized requests and permanent
// errors are never retried.
//
// Add a Breaker (package breaker), or use fallback.Recommended for the
// whole setup: this policy on every target, a breaker per target, and a
// chain that falls back on overload, exhausted quota and open breakers.
func Recommended() Policy {
	return Policy{
		MaxAttempts:   3,
		BaseDelay:     500 * time.Millisecond,
		MaxDelay:      10 * time.Second,
		WaitBudget:    30 * time.Second,
		MaxServerWait: time.Minute,
		PerKind: map[Kind]Override{
			KindRateLimited: {MaxAttempts: 5, BaseDelay: 2 * time.Second, MaxDelay: 20 * time.Second},
			KindOverloaded:  {MaxAttempts: 2, BaseDelay: time.Second},
		},
	}
}
