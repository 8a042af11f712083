package proxy

import (
	"container/list"
	"sync"
	"sync/atomic"

	"github.com/rebound-go/rebound"
)

// breakers holds the breaker of each upstream and model label
// (modelLabels), made on first use, at most size of them: made-up names
// share one label, and the bound holds the rest for a config of many
// upstreams and models. When
// full, a new key evicts the least recently used breaker that is not
// refusing calls: an open breaker is what keeps calls off a dead
// upstream, and made-up models must not push it out. Only when every one
// kept is refusing does the least recently used go, so that memory stays
// bounded (each of them took failed calls to open). An evicted breaker
// goes on working for the calls that hold it.
type breakers struct {
	make func(key string) rebound.Breaker
	size int

	mu     sync.Mutex // guards byKey and recent
	byKey  map[string]*list.Element
	recent list.List // of *keptBreaker, most recently used first
}

// keptBreaker is a breaker and what the proxy saw of it: it is the
// rebound.Breaker of the calls, and notes whether it refuses them.
type keptBreaker struct {
	key      string
	b        rebound.Breaker
	refusing atomic.Bool // its latest Allow refused: open, as far as calls saw
}

// Allow asks b, and notes whether it refused.
func (k *keptBreaker) Allow() (rebound.Permit, error) {
	permit, err := k.b.Allow()
	k.refusing.Store(err != nil)
	return permit, err
}

// Done tells b.
func (k *keptBreaker) Done(p rebound.Permit, o rebound.Outcome) { k.b.Done(p, o) }

func newBreakers(make func(string) rebound.Breaker, size int) *breakers {
	return &breakers{make: make, size: size, byKey: map[string]*list.Element{}}
}

// get returns key's breaker.
func (s *breakers) get(key string) *keptBreaker {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.byKey[key]; ok {
		s.recent.MoveToFront(e)
		return e.Value.(*keptBreaker)
	}
	if s.recent.Len() >= s.size {
		victim := s.recent.Back()
		for e := victim; e != nil; e = e.Prev() {
			if !e.Value.(*keptBreaker).refusing.Load() {
				victim = e
				break
			}
		}
		delete(s.byKey, victim.Value.(*keptBreaker).key)
		s.recent.Remove(victim)
	}
	k := &keptBreaker{key: key, b: s.make(key)}
	s.byKey[key] = s.recent.PushFront(k)
	return k
}
