package breaker

import "github.com/rebound-go/rebound/internal/lru"

// DefaultSetSize is how many breakers a Set holds unless told otherwise.
const DefaultSetSize = 1024

// Set holds one Breaker per key ("model:task", say), created on first use
// with the Set's Config and named after its key. It is safe for concurrent
// use.
//
// A Set is bounded: when it is full, a new key evicts the breaker used
// least recently that is closed: an open or half-open breaker is what
// keeps calls off a failing target, and a flood of new keys must not push
// it out. Only when none is closed does the least recently used of all
// go, so that memory stays bounded. An evicted breaker keeps working for
// whoever holds it, but a later Get of its key starts a fresh one.
type Set struct {
	cfg      Config
	breakers lru.Map[string, *Breaker]
}

// NewSet returns an empty Set of at most size breakers; a size of zero or
// less means DefaultSetSize.
func NewSet(cfg Config, size int) *Set {
	if size <= 0 {
		size = DefaultSetSize
	}
	s := &Set{cfg: cfg}
	s.breakers.Size = size
	s.breakers.Stay = func(b *Breaker) bool { return b.State() != Closed }
	return s
}

// Get returns the breaker for key, creating it if need be.
func (s *Set) Get(key string) *Breaker {
	return s.breakers.Get(key, func() *Breaker { return New(key, s.cfg) })
}

// Len returns how many breakers the Set holds.
func (s *Set) Len() int { return s.breakers.Len() }
