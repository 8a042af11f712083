// Package lru is rebound's one bounded map of values by key: a Transport's
// retry budgets per host, the first-token times per target, the sets of
// breakers (breaker.Set, the proxy's per upstream and model), a monitor's
// windows, the attributes of a target's metrics.
//
// One rule evicts: when a new key would pass the bound, the entry used
// least recently goes, passing over the entries its owner says must stay
// (an open breaker is what keeps calls off a dead target, and a flood of
// new keys must not push it out), unless every entry must: then the least
// recently used of all goes, so that memory stays bounded. An entry that
// goes keeps working for whoever holds its value; a later Get of its key
// makes a fresh one.
package lru

import (
	"iter"
	"sync"
)

// DefaultSize is how many entries a Map holds when its Size is zero.
const DefaultSize = 1024

// Map holds values by key, at most Size of them. Its zero value is ready
// to use; set the fields before first use. It is safe for concurrent use:
// each call takes one short lock.
type Map[K comparable, V any] struct {
	// Size bounds the entries. Zero means DefaultSize.
	Size int
	// Stay, if set, reports whether an entry should stay while another
	// can go. Nil means none needs to.
	Stay func(V) bool

	mu    sync.Mutex // guards byKey and the list
	byKey map[K]*entry[K, V]
	// The entries in order of use, from newest (the most recently used)
	// by older to oldest.
	newest, oldest *entry[K, V]
}

type entry[K comparable, V any] struct {
	key          K
	v            V
	newer, older *entry[K, V]
}

// Get returns key's value, made by make if the map holds none, and marks
// it the most recently used. make runs under the map's lock: it must not
// use the map.
func (m *Map[K, V]) Get(key K, make func() V) V {
	m.mu.Lock()
	if e := m.byKey[key]; e != nil {
		m.use(e)
		v := e.v
		m.mu.Unlock()
		return v
	}
	defer m.mu.Unlock() // make may panic
	if m.byKey == nil {
		m.byKey = map[K]*entry[K, V]{}
	}
	size := m.Size
	if size <= 0 {
		size = DefaultSize
	}
	if len(m.byKey) >= size {
		m.evict()
	}
	e := &entry[K, V]{key: key, v: make()}
	m.byKey[key] = e
	m.push(e)
	return e.v
}

// Load returns key's value, if the map holds one, and marks it the most
// recently used.
func (m *Map[K, V]) Load(key K) (v V, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byKey[key]
	if e == nil {
		return v, false
	}
	m.use(e)
	return e.v, true
}

// All returns the entries the map holds now, newest first, without
// marking them used: a copy taken under the lock, so that yield may use
// the map.
func (m *Map[K, V]) All() iter.Seq2[K, V] {
	type pair struct {
		k K
		v V
	}
	m.mu.Lock()
	held := make([]pair, 0, len(m.byKey))
	for e := m.newest; e != nil; e = e.older {
		held = append(held, pair{e.key, e.v})
	}
	m.mu.Unlock()
	return func(yield func(K, V) bool) {
		for _, p := range held {
			if !yield(p.k, p.v) {
				return
			}
		}
	}
}

// Len returns how many entries the map holds.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.byKey)
}

// use marks e the most recently used. m.mu is held.
func (m *Map[K, V]) use(e *entry[K, V]) {
	if m.newest == e {
		return
	}
	m.unlink(e)
	m.push(e)
}

// push puts e first in the order of use. m.mu is held.
func (m *Map[K, V]) push(e *entry[K, V]) {
	e.newer, e.older = nil, m.newest
	if m.newest != nil {
		m.newest.newer = e
	} else {
		m.oldest = e
	}
	m.newest = e
}

// unlink takes e out of the order of use. m.mu is held.
func (m *Map[K, V]) unlink(e *entry[K, V]) {
	if e.newer != nil {
		e.newer.older = e.older
	} else {
		m.newest = e.older
	}
	if e.older != nil {
		e.older.newer = e.newer
	} else {
		m.oldest = e.newer
	}
}

// evict drops the least recently used entry that need not stay, or the
// least recently used of all. m.mu is held, and the map holds an entry.
func (m *Map[K, V]) evict() {
	victim := m.oldest
	if m.Stay != nil {
		for e := victim; e != nil; e = e.newer {
			if !m.Stay(e.v) {
				victim = e
				break
			}
		}
	}
	m.unlink(victim)
	delete(m.byKey, victim.key)
}
