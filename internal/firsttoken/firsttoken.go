// Package firsttoken keeps the recent first-token times of each target (a
// call's target, or a host): how long its attempts took from their start
// to their first content. A Hedge reads their percentile to set its delay,
// and a Transport with an adaptive first-token bound to set the bound.
package firsttoken

import (
	"slices"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/lru"
)

// MinSamples is how many times a percentile is trusted from.
const MinSamples = 16

// Times keeps recent first-token times per key, for at most
// lru.DefaultSize keys (the least recently used goes first: its times are
// cheap to learn again). Its zero value is ready to use; it is safe for
// concurrent use.
type Times struct {
	keys lru.Map[string, *ring]
}

// ring is a ring of one key's recent times, and the last percentile taken
// of them.
type ring struct {
	mu    sync.Mutex // guards the rest
	times []time.Duration
	n     int // samples taken, ever
	// cached is the percentile q of the times as they were after sample
	// cachedAt: sorting on every call would cost more than the call's
	// other bookkeeping, and a few samples move a percentile little.
	cached   time.Duration
	cachedQ  float64
	cachedAt int
}

// recompute is how many samples a cached percentile outlives.
const recompute = 8

// Add notes d for key, in a ring of size samples (at least one).
func (t *Times) Add(key string, d time.Duration, size int) {
	r := t.keys.Get(key, func() *ring { return &ring{times: make([]time.Duration, 0, max(size, 1))} })
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.times) < cap(r.times) {
		r.times = append(r.times, d)
	} else {
		r.times[r.n%len(r.times)] = d
	}
	r.n++
}

// Percentile returns the q-th percentile of key's recent times, if at
// least least of them are known.
func (t *Times) Percentile(key string, q float64, least int) (time.Duration, bool) {
	r, ok := t.keys.Load(key)
	if !ok {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n < least || r.n == 0 {
		return 0, false
	}
	if r.cachedQ != q || r.n-r.cachedAt >= recompute {
		sorted := slices.Clone(r.times)
		slices.Sort(sorted)
		r.cached, r.cachedQ, r.cachedAt = sorted[int(float64(len(sorted)-1)*q)], q, r.n
	}
	return r.cached, true
}
