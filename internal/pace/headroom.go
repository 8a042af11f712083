package pace

import (
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/header"
)

// Announced is what a provider's rate-limit headers last said of its
// quotas, less what was sent since: the headroom a limiter reports, so
// that a caller with several keys can send to the one with the most left.
// Its zero value knows nothing; it is safe for concurrent use.
type Announced struct {
	mu       sync.Mutex // guards the fields below
	requests announcedQuota
	tokens   announcedQuota
}

// announcedQuota is one quota as announced.
type announcedQuota struct {
	limit, left float64   // left goes down as calls are sent
	until       time.Time // the quota's reset; zero: nothing known
}

// Learn takes in the quotas of rl, read at now. A quota that gives no
// limit, no remaining count or no reset is left as it was known.
func (a *Announced) Learn(rl header.Limits, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests.learn(rl.Requests, now)
	a.tokens.learn(rl.Tokens, now)
}

func (q *announcedQuota) learn(h header.Quota, now time.Time) {
	if h.Limit <= 0 || h.Remaining < 0 || !h.HasReset || h.Reset <= 0 {
		return
	}
	q.limit, q.left, q.until = float64(h.Limit), float64(min(h.Remaining, h.Limit)), now.Add(h.Reset)
}

// Sent counts a call of tokens sent at now against what is left.
func (a *Announced) Sent(tokens int, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.requests.spend(1, now)
	a.tokens.spend(float64(max(tokens, 0)), now)
}

func (q *announcedQuota) spend(n float64, now time.Time) {
	if now.Before(q.until) {
		q.left = max(q.left-n, 0)
	}
}

// Headroom returns the fractions of the requests and tokens limits left at
// now, each 1 where nothing is known (never announced, or reset since),
// and whether either is known.
func (a *Announced) Headroom(now time.Time) (requests, tokens float64, known bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	requests, rk := a.requests.fraction(now)
	tokens, tk := a.tokens.fraction(now)
	return requests, tokens, rk || tk
}

func (q *announcedQuota) fraction(now time.Time) (float64, bool) {
	if !now.Before(q.until) {
		return 1, false
	}
	return q.left / q.limit, true
}
