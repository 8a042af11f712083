package lru

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
)

func TestMapEvictsTheLeastRecentlyUsed(t *testing.T) {
	m := Map[string, int]{Size: 3}
	made := 0
	get := func(k string) int { return m.Get(k, func() int { made++; return made }) }
	a, b := get("a"), get("b")
	get("c")
	if get("a") != a {
		t.Fatal("Get made a second value for one key")
	}
	get("d") // full: "b" was used least recently ("a" was used again)
	if _, ok := m.Load("b"); ok {
		t.Error(`"b" was kept; it was the least recently used`)
	}
	for _, k := range []string{"a", "c", "d"} {
		if _, ok := m.Load(k); !ok {
			t.Errorf("%q was evicted", k)
		}
	}
	if m.Len() != 3 {
		t.Errorf("len %d, want 3", m.Len())
	}
	if get("b") == b {
		t.Error("an evicted key came back with its old value")
	}
}

func TestMapPassesOverWhatMustStay(t *testing.T) {
	open := map[int]bool{}
	m := Map[string, int]{Size: 3, Stay: func(v int) bool { return open[v] }}
	n := 0
	get := func(k string) int { return m.Get(k, func() int { n++; return n }) }
	open[get("a")] = true
	open[get("b")] = true
	get("c")
	get("d") // "a" and "b" must stay: "c" goes, though used more recently
	if _, ok := m.Load("c"); ok {
		t.Error(`"c" was kept while "a" and "b", which must stay, were older`)
	}
	if _, ok := m.Load("a"); !ok {
		t.Error(`"a" was evicted though it must stay`)
	}
	open[get("d")] = true
	get("e") // every entry must stay: the least recently used of all goes
	if m.Len() != 3 {
		t.Fatalf("len %d: the bound did not hold when every entry must stay", m.Len())
	}
	if _, ok := m.Load("b"); ok {
		t.Error(`"b", the least recently used, was kept when all must stay`)
	}
}

func TestMapZeroValueHoldsDefaultSize(t *testing.T) {
	var m Map[int, int]
	for i := range DefaultSize + 10 {
		m.Get(i, func() int { return i })
	}
	if m.Len() != DefaultSize {
		t.Errorf("len %d, want %d", m.Len(), DefaultSize)
	}
	if _, ok := m.Load(0); ok {
		t.Error("the first key, never used again, was kept")
	}
}

// The map against a plain model of the rule, under random use.
func TestMapMatchesTheRule(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	stay := map[int]bool{}
	m := Map[int, int]{Size: 8, Stay: func(v int) bool { return stay[v] }}
	var order []int // the model: keys, least recently used first
	use := func(k int) {
		for i, o := range order {
			if o == k {
				order = append(order[:i], order[i+1:]...)
				break
			}
		}
		order = append(order, k)
	}
	for range 10_000 {
		k := r.IntN(20)
		if r.IntN(4) == 0 {
			_, ok := m.Load(k)
			held := false
			for _, o := range order {
				held = held || o == k
			}
			if ok != held {
				t.Fatalf("Load(%d) = %v, the model holds it: %v", k, ok, held)
			}
			if ok {
				use(k)
			}
			continue
		}
		held := false
		for _, o := range order {
			held = held || o == k
		}
		if !held && len(order) == 8 {
			victim := 0
			for i, o := range order {
				if !stay[o] {
					victim = i
					break
				}
			}
			order = append(order[:victim], order[victim+1:]...)
		}
		m.Get(k, func() int { return k })
		use(k)
		stay[k] = r.IntN(3) == 0
	}
	if m.Len() != len(order) {
		t.Fatalf("len %d, the model holds %d", m.Len(), len(order))
	}
	for _, k := range order {
		if _, ok := m.Load(k); !ok {
			t.Fatalf("%d is missing", k)
		}
	}
}

func TestMapIsSafeForConcurrentUse(t *testing.T) {
	m := Map[string, int]{Size: 16}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				k := fmt.Sprint((g*7 + i) % 40)
				m.Get(k, func() int { return i })
				m.Load(k)
			}
		})
	}
	wg.Wait()
	if m.Len() > 16 {
		t.Errorf("len %d above the bound", m.Len())
	}
}

func BenchmarkMapGetHit(b *testing.B) {
	var m Map[string, int]
	keys := []string{"api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com"}
	for _, k := range keys {
		m.Get(k, func() int { return 0 })
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		m.Get(keys[i%len(keys)], func() int { return 0 })
		i++
	}
}

func TestMapOfOneEntry(t *testing.T) {
	m := Map[string, int]{Size: 1, Stay: func(int) bool { return true }}
	m.Get("a", func() int { return 1 })
	if got := m.Get("b", func() int { return 2 }); got != 2 || m.Len() != 1 {
		t.Fatalf("got %d, len %d; want 2, 1", got, m.Len())
	}
	if _, ok := m.Load("a"); ok {
		t.Error(`"a" stayed in a map of one entry that had to take "b"`)
	}
	m = Map[string, int]{Size: -5}
	for i := range DefaultSize + 1 {
		m.Get(string(rune('a'+i%26))+string(rune(i)), func() int { return i })
	}
	if m.Len() != DefaultSize {
		t.Errorf("a negative size holds %d entries, want the default %d", m.Len(), DefaultSize)
	}
}

func TestAllListsEntriesNewestFirstWithoutUsingThem(t *testing.T) {
	m := Map[string, int]{Size: 3}
	for i, k := range []string{"a", "b", "c"} {
		m.Get(k, func() int { return i })
	}
	var keys []string
	for k, v := range m.All() {
		keys = append(keys, fmt.Sprint(k, v))
		m.Get("x"+k, func() int { return 0 }) // yield may use the map
	}
	if got := strings.Join(keys, " "); got != "c2 b1 a0" {
		t.Fatalf("All: %s, want c2 b1 a0", got)
	}
}
