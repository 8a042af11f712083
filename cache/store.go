package cache

import (
	"container/list"
	"context"
	"net/http"
	"sync"
	"time"
)

// Entry is one stored answer: its status, its header and its body as the
// client received it, and when it was stored.
type Entry struct {
	Status int
	Header http.Header
	Body   []byte
	Stored time.Time
}

// Size is what e takes in a store, near enough: its body, its header's
// names and values, and a fixed overhead.
func (e Entry) Size() int64 {
	n := int64(len(e.Body)) + 64
	for k, vs := range e.Header {
		n += int64(len(k))
		for _, v := range vs {
			n += int64(len(v)) + 16
		}
	}
	return n
}

// Store holds answers by key. Its methods are safe for concurrent use. An
// Entry it returns is shared: the caller must not change it.
type Store interface {
	// Get returns the answer stored at key, if there is one.
	Get(ctx context.Context, key string) (e Entry, ok bool, err error)
	// Put stores e at key, to be let go after keep at the latest; it
	// replaces what key held.
	Put(ctx context.Context, key string, e Entry, keep time.Duration) error
}

// Memory is a Store in the process, bounded in bytes: once a new answer
// would take it past its bound, the answers used least recently are let
// go. An answer is let go after its keep time too. Its zero value holds
// DefaultMaxBytes.
type Memory struct {
	// MaxBytes bounds what the store holds (Entry.Size and the keys);
	// an answer larger than a quarter of it is refused with ErrTooLarge.
	// Zero means DefaultMaxBytes.
	MaxBytes int64

	mu    sync.Mutex
	items map[string]*list.Element
	order list.List // of *memoryItem, the most recently used first
	bytes int64
}

type memoryItem struct {
	key     string
	e       Entry
	size    int64
	expires time.Time
}

// NewMemory returns a Memory that holds at most maxBytes; zero means
// DefaultMaxBytes.
func NewMemory(maxBytes int64) *Memory { return &Memory{MaxBytes: maxBytes} }

func (m *Memory) max() int64 {
	if m.MaxBytes <= 0 {
		return DefaultMaxBytes
	}
	return m.MaxBytes
}

// Get returns the answer at key, unless it is past its keep time.
func (m *Memory) Get(_ context.Context, key string) (Entry, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.items[key]
	if !ok {
		return Entry{}, false, nil
	}
	it := el.Value.(*memoryItem)
	if !time.Now().Before(it.expires) {
		m.remove(el)
		return Entry{}, false, nil
	}
	m.order.MoveToFront(el)
	return it.e, true, nil
}

// Put stores e at key until keep has passed, letting go of the answers
// used least recently while the store would be past its bound.
func (m *Memory) Put(_ context.Context, key string, e Entry, keep time.Duration) error {
	size := e.Size() + int64(len(key))
	max := m.max()
	if size > max/4 {
		return ErrTooLarge
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.items == nil {
		m.items = make(map[string]*list.Element)
	}
	if el, ok := m.items[key]; ok {
		m.remove(el)
	}
	for m.bytes+size > max {
		m.remove(m.order.Back())
	}
	m.items[key] = m.order.PushFront(&memoryItem{key: key, e: e, size: size, expires: time.Now().Add(keep)})
	m.bytes += size
	return nil
}

func (m *Memory) remove(el *list.Element) {
	it := el.Value.(*memoryItem)
	m.order.Remove(el)
	delete(m.items, it.key)
	m.bytes -= it.size
}

// Len returns how many answers m holds and their size in bytes.
func (m *Memory) Len() (entries int, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.items), m.bytes
}
