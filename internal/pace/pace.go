// Package pace is the one rule by which rebound's rate limiters turn a
// per-minute limit into a burst and a steady pace, and a provider's
// rate-limit headers into a slower pace: ratelimit's Limiter, in memory,
// and reboundredis's, shared on Redis, both follow it.
//
// A limit of n a minute is kept in every window of w (60 s, or a little
// more for a margin) by a burst of b at once and then (n − b) per w: a
// window sees at most the burst that was waiting at its start and what
// the pace adds during it.
package pace

import (
	"math"
	"time"

	"github.com/rebound-go/rebound/internal/header"
)

// A Pace is how a limit is kept: Burst at once, then Rate a second.
type Pace struct {
	Rate  float64 // per second; zero means no limit
	Burst int
}

// PerMinute returns the pace that lets no window of w see more than n: a
// burst of b (at least 1, at most n), then (n − b) per w. The zero Pace
// for n ≤ 0.
func PerMinute(n float64, b int, w time.Duration) Pace {
	if n <= 0 {
		return Pace{}
	}
	b = max(min(b, int(n)), 1)
	r := (n - float64(b)) / w.Seconds()
	if r <= 0 {
		r = n / w.Seconds() // a limit below 2: better a second call late than none
	}
	return Pace{Rate: r, Burst: b}
}

// Requests returns the pace of a requests-per-minute limit: bursts of a
// second's worth.
func Requests(n float64, w time.Duration) Pace {
	return PerMinute(n, int(math.Ceil(n/60)), w)
}

// Tokens returns the pace of a tokens-per-minute limit: bursts of burst
// tokens, or of ten seconds' worth when burst is not positive; a burst
// of more than half the limit is cut to half, so that the pace is left at
// least half of it.
func Tokens(n float64, burst int, w time.Duration) Pace {
	if burst <= 0 {
		burst = int(math.Ceil(n / 6))
	}
	return PerMinute(n, min(burst, int(math.Ceil(n/2))), w)
}

// Learned returns the pace at which what q says is left lasts until q's
// reset, never faster than the configured pace: the configured pace itself
// when what is left is plenty, a slower one with the configured burst when
// it is not, and, with no limit configured, one whose burst is all that is
// left. With nothing left it returns the zero Pace: no call until the
// reset. It reports false when q says nothing of the kind.
func Learned(q header.Quota, configured Pace) (Pace, bool) {
	if q.Remaining < 0 || !q.HasReset || q.Reset <= 0 {
		return Pace{}, false
	}
	if q.Remaining == 0 {
		return Pace{}, true
	}
	r := float64(q.Remaining) / q.Reset.Seconds()
	switch {
	case configured.Rate == 0:
		return Pace{Rate: r, Burst: int(min(q.Remaining, math.MaxInt32))}, true
	case r >= configured.Rate:
		return configured, true
	}
	return Pace{Rate: r, Burst: configured.Burst}, true
}
