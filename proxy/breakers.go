package proxy

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/internal/lru"
)

// breakers holds the breaker of each upstream and model label
// (modelLabels), made on first use, at most size of them: made-up names
// share one label, and the bound holds the rest for a config of many
// upstreams and models. When full, a new key evicts the least recently
// used breaker that is not refusing calls: an open breaker is what keeps
// calls off a dead upstream, and made-up models must not push it out.
// Only when every one kept is refusing does the least recently used go,
// so that memory stays bounded (each of them took failed calls to open).
// An evicted breaker goes on working for the calls that hold it.
type breakers struct {
	make func(key string) rebound.Breaker
	kept lru.Map[string, *keptBreaker]
}

// keptBreaker is a breaker and what the proxy saw of it: it is the
// rebound.Breaker of the calls, and notes whether it refuses them.
type keptBreaker struct {
	b         rebound.Breaker
	refusing  atomic.Bool  // its latest Allow refused: open, as far as calls saw
	openUntil atomic.Int64 // Unix ns: the end of the open spell its latest refusal told of; 0 for none
}

// Allow asks b, and notes whether it refused, and until when.
func (k *keptBreaker) Allow() (rebound.Permit, error) {
	permit, err := k.b.Allow()
	k.refusing.Store(err != nil)
	if until := openUntil(err); until != 0 || k.openUntil.Load() != 0 {
		k.openUntil.Store(until)
	}
	return permit, err
}

// openUntil returns when the open spell a breaker's refusal err tells of
// ends, in Unix ns; 0 for none.
func openUntil(err error) int64 {
	if err == nil {
		return 0 // and nothing escapes for a call allowed
	}
	var oe *breaker.OpenError
	if errors.As(err, &oe) && !oe.Until.IsZero() {
		return oe.Until.UnixNano()
	}
	return 0
}

// open reports whether b refuses calls at now, as its latest refusal
// said: one that said no end (a half-open breaker's, its probes taken)
// is asked again.
func (k *keptBreaker) open(now time.Time) bool { return now.UnixNano() < k.openUntil.Load() }

// Done tells b.
func (k *keptBreaker) Done(p rebound.Permit, o rebound.Outcome) { k.b.Done(p, o) }

func newBreakers(make func(string) rebound.Breaker, size int) *breakers {
	s := &breakers{make: make}
	s.kept.Size = size
	s.kept.Stay = func(k *keptBreaker) bool { return k.refusing.Load() }
	return s
}

// get returns key's breaker.
func (s *breakers) get(key string) *keptBreaker {
	return s.kept.Get(key, func() *keptBreaker { return &keptBreaker{b: s.make(key)} })
}
