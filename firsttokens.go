package rebound

import (
	"slices"
	"sync"
	"time"
)

// firstTokens keeps recent first-token times per key (a target, or a
// host), for the bounds and delays that learn from them. Its zero value
// is ready to use; it is safe for concurrent use.
type firstTokens struct {
	mu   sync.Mutex // guards keys
	keys map[string]*tokenRing
}

// maxTokenKeys bounds how many keys' times a firstTokens keeps.
const maxTokenKeys = 1024

// tokenRing is a ring of one key's recent first-token times, and the last
// percentile taken of them.
type tokenRing struct {
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

// add notes d for key, in a ring of size samples.
func (f *firstTokens) add(key string, d time.Duration, size int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.keys[key]
	if r == nil {
		if f.keys == nil {
			f.keys = map[string]*tokenRing{}
		}
		if len(f.keys) >= maxTokenKeys {
			for k := range f.keys { // any one: its times are cheap to learn again
				delete(f.keys, k)
				break
			}
		}
		r = &tokenRing{times: make([]time.Duration, 0, size)}
		f.keys[key] = r
	}
	if len(r.times) < size {
		r.times = append(r.times, d)
	} else {
		r.times[r.n%size] = d
	}
	r.n++
}

// percentile returns the q-th percentile of key's recent times, if at
// least least of them are known.
func (f *firstTokens) percentile(key string, q float64, size, least int) (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.keys[key]
	if r == nil || r.n < least {
		return 0, false
	}
	if r.cachedQ != q || r.n-r.cachedAt >= recompute {
		sorted := slices.Clone(r.times[:min(r.n, size)])
		slices.Sort(sorted)
		r.cached, r.cachedQ, r.cachedAt = sorted[int(float64(len(sorted)-1)*q)], q, r.n
	}
	return r.cached, true
}
