package proxy

import (
	"errors"
	"testing"

	"github.com/rebound-go/rebound"
)

// switchBreaker refuses calls while open.
type switchBreaker struct{ open bool }

func (b *switchBreaker) Allow() (rebound.Permit, error) {
	if b.open {
		return 0, errors.New("open")
	}
	return 0, nil
}

func (b *switchBreaker) Done(rebound.Permit, rebound.Outcome) {}

// madeBreakers returns a set of at most size breakers, and the count of
// breakers it made for each key.
func madeBreakers(size int) (*breakers, map[string]int) {
	made := map[string]int{}
	return newBreakers(func(key string) rebound.Breaker {
		made[key]++
		return &switchBreaker{}
	}, size), made
}

// refuse opens key's breaker and has a call see it refuse.
func refuse(t *testing.T, s *breakers, key string) {
	t.Helper()
	k := s.get(key)
	k.b.(*switchBreaker).open = true
	if _, err := k.Allow(); err == nil {
		t.Fatalf("%s: an open breaker allowed a call", key)
	}
}

// TestFullBreakersPassOverRefusingOnes: when the set is full, a new key
// evicts the least recently used breaker that lets calls through, never one
// a call saw refuse, though it is older.
func TestFullBreakersPassOverRefusingOnes(t *testing.T) {
	s, made := madeBreakers(3)
	refuse(t, s, "dead:gpt")
	s.get("a:one")
	s.get("a:two")
	s.get("a:three") // full: a:one goes, passed over to from dead:gpt
	if _, err := s.get("dead:gpt").Allow(); err == nil || made["dead:gpt"] != 1 {
		t.Errorf("dead:gpt's open breaker was evicted (made %d times, refusing: %v)", made["dead:gpt"], err != nil)
	}
	for _, key := range []string{"a:two", "a:three"} {
		if s.get(key); made[key] != 1 {
			t.Errorf("%s, used after a:one, was evicted: made %d times", key, made[key])
		}
	}
	if s.get("a:one"); made["a:one"] != 2 {
		t.Errorf("a:one, the least recently used that lets calls through, made %d times, want 2 (evicted)", made["a:one"])
	}
}

// TestFullBreakersAllRefusingEvictOldest: when every breaker kept refuses
// calls, a new key evicts the least recently used of them, so that the set
// stays bounded.
func TestFullBreakersAllRefusingEvictOldest(t *testing.T) {
	s, made := madeBreakers(2)
	refuse(t, s, "a:old")
	refuse(t, s, "a:new")
	s.get("b:other") // full, every one refusing: a:old goes
	if s.get("a:new"); made["a:new"] != 1 {
		t.Errorf("a:new, the more recently used, was evicted: made %d times", made["a:new"])
	}
	if s.get("a:old"); made["a:old"] != 2 {
		t.Errorf("a:old, the least recently used, made %d times, want 2 (evicted)", made["a:old"])
	}
}
