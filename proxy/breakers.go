package proxy

import (
	"sync"

	"github.com/rebound-go/rebound"
)

// breakers holds the breaker of each upstream and model, made on first
// use, at most size of them: a model name comes from the client, and a
// client that makes them up must not grow the proxy without bound. When
// full, a new key evicts the oldest; an evicted breaker goes on working
// for the calls that hold it.
type breakers struct {
	make func(key string) rebound.Breaker
	size int

	mu    sync.Mutex // guards byKey and order
	byKey map[string]rebound.Breaker
	order []string // keys, oldest first
}

func newBreakers(make func(string) rebound.Breaker, size int) *breakers {
	return &breakers{make: make, size: size, byKey: map[string]rebound.Breaker{}}
}

// get returns key's breaker.
func (s *breakers) get(key string) rebound.Breaker {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.byKey[key]; ok {
		return b
	}
	if len(s.order) >= s.size {
		delete(s.byKey, s.order[0])
		s.order = s.order[1:]
	}
	b := s.make(key)
	s.byKey[key] = b
	s.order = append(s.order, key)
	return b
}
