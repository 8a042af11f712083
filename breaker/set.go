package breaker

import "sync"

// DefaultSetSize is how many breakers a Set holds unless told otherwise.
const DefaultSetSize = 1024

// Set holds one Breaker per key ("model:task", say), created on first use
// with the Set's Config and named after its key. It is safe for concurrent
// use, and a Get of a key that exists takes no lock.
//
// A Set is bounded: when it is full, a new key evicts the oldest closed
// breaker, or the oldest of all if none is closed. An evicted breaker
// keeps working for whoever holds it, but a later Get of its key starts a
// fresh one.
type Set struct {
	cfg  Config
	size int

	breakers sync.Map // key → *Breaker

	mu    sync.Mutex // guards order and the writes to breakers
	order []string   // keys, oldest first
}

// NewSet returns an empty Set of at most size breakers; a size of zero or
// less means DefaultSetSize.
func NewSet(cfg Config, size int) *Set {
	if size <= 0 {
		size = DefaultSetSize
	}
	return &Set{cfg: cfg, size: size}
}

// Get returns the breaker for key, creating it if need be.
func (s *Set) Get(key string) *Breaker {
	if b, ok := s.breakers.Load(key); ok {
		return b.(*Breaker)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.breakers.Load(key); ok {
		return b.(*Breaker)
	}
	if len(s.order) >= s.size {
		s.evict()
	}
	b := New(key, s.cfg)
	s.breakers.Store(key, b)
	s.order = append(s.order, key)
	return b
}

// Len returns how many breakers the Set holds.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

// evict drops the oldest closed breaker, or the oldest of all.
func (s *Set) evict() {
	victim := 0
	for i, key := range s.order {
		if b, ok := s.breakers.Load(key); ok && b.(*Breaker).State() == Closed {
			victim = i
			break
		}
	}
	s.breakers.Delete(s.order[victim])
	s.order = append(s.order[:victim], s.order[victim+1:]...)
}
