package queue

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// popAll pops every value, in turn order.
func popAll(q *Queue[string]) []string {
	var got []string
	for {
		it, ok := q.Pop()
		if !ok {
			return got
		}
		got = append(got, it.Value)
	}
}

func TestHigherClassFirstFIFOWithin(t *testing.T) {
	q := New[string](2, 100)
	for _, v := range []string{"b1", "i1", "b2", "i2", "i3"} {
		q.Push(map[byte]int{'i': 0, 'b': 1}[v[0]], v)
	}
	if q.Len() != 5 || q.LenOf(0) != 3 || q.LenOf(1) != 2 {
		t.Fatalf("lengths %d %d %d", q.Len(), q.LenOf(0), q.LenOf(1))
	}
	if got, want := popAll(q), []string{"i1", "i2", "i3", "b1", "b2"}; !slices.Equal(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if q.Len() != 0 {
		t.Errorf("%d left", q.Len())
	}
}

// TestPassOverBound: a batch call waiting while interactive calls keep
// coming sees exactly maxPassOver of them go first, then goes.
func TestPassOverBound(t *testing.T) {
	for _, m := range []int{1, 2, 5} {
		q := New[string](2, m)
		q.Push(1, "b1")
		q.Push(1, "b2")
		for range 3 * (m + 1) {
			q.Push(0, "i")
		}
		got := popAll(q)
		want := slices.Repeat([]string{"i"}, m)
		want = append(want, "b1")
		want = append(want, slices.Repeat([]string{"i"}, m)...)
		want = append(want, "b2")
		want = append(want, slices.Repeat([]string{"i"}, 3*(m+1)-2*m)...)
		if !slices.Equal(got, want) {
			t.Errorf("maxPassOver %d: %v, want %v", m, got, want)
		}
	}
}

// TestCountStartsWithTheClass: a class's count starts when its first call
// arrives, not before: turns of higher classes while it had nobody
// waiting are not held against it.
func TestCountStartsWithTheClass(t *testing.T) {
	q := New[string](2, 2)
	q.Push(0, "i1")
	q.Push(0, "i2")
	q.Push(0, "i3")
	q.Pop()
	q.Pop()
	q.Push(1, "b")
	q.Push(0, "i4")
	if got := popAll(q); !slices.Equal(got, []string{"i3", "i4", "b"}) {
		t.Errorf("order %v", got)
	}
}

// TestRemove: a removed value never comes out, Remove tells a waiting
// item from one handed out, and a class emptied by removals starts its
// count again.
func TestRemove(t *testing.T) {
	q := New[string](2, 1)
	b := q.Push(1, "b")
	i := q.Push(0, "i")
	q.Push(0, "i2")
	if !q.Remove(b) || q.Remove(b) || q.Len() != 2 || q.LenOf(1) != 0 {
		t.Fatalf("removing b: len %d", q.Len())
	}
	if it, _ := q.Pop(); it != i || q.Remove(i) {
		t.Fatalf("popped %v; Remove of a popped item must report false", it.Value)
	}
	q.Push(1, "b2")
	q.Push(0, "i3")
	// b2 arrived after the pass-over above: its count is 0, so i2 goes
	// first, then b2 (passed over once), then i3.
	if got := popAll(q); !slices.Equal(got, []string{"i2", "b2", "i3"}) {
		t.Errorf("order %v", got)
	}
}

// TestThreeClasses: the lowest class due goes first, and a middle class
// is still never passed over more than the bound by higher classes.
func TestThreeClasses(t *testing.T) {
	q := New[string](3, 1)
	q.Push(2, "c")
	q.Push(1, "b")
	q.Push(0, "a1")
	q.Push(0, "a2")
	q.Push(0, "a3")
	if got := popAll(q); !slices.Equal(got, []string{"a1", "c", "b", "a2", "a3"}) {
		t.Errorf("order %v", got)
	}
}

// TestRandomOperations runs random pushes, pops and removals and checks,
// at every pop: a value comes out whenever one waits, values of a class
// come out in the order they went in, and no waiting value is passed over
// by more than maxPassOver values of higher classes since its class's
// last turn.
func TestRandomOperations(t *testing.T) {
	const seed = 7
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	type value struct {
		class, seq int
		passed     int // higher-class turns since its class's last turn, or its arrival
	}
	for _, m := range []int{1, 3, 16} {
		for _, classes := range []int{1, 2, 3} {
			q := New[*value](classes, m)
			var waiting []*Item[*value]
			lastOut := make([]int, classes)
			seq := 0
			for range 20000 {
				switch op := rng.IntN(10); {
				case op < 5:
					seq++
					c := rng.IntN(classes)
					if classes > 1 && rng.IntN(4) == 0 {
						c = classes - 1 // lower classes often flood
					}
					waiting = append(waiting, q.Push(c, &value{class: c, seq: seq}))
				case op < 9:
					it, ok := q.Pop()
					if ok != (len(waiting) > 0) {
						t.Fatalf("Pop %v with %d waiting", ok, len(waiting))
					}
					if !ok {
						continue
					}
					v := it.Value
					if v.seq < lastOut[v.class] {
						t.Fatalf("class %d out of order", v.class)
					}
					lastOut[v.class] = v.seq
					waiting = slices.DeleteFunc(waiting, func(w *Item[*value]) bool { return w == it })
					for _, w := range waiting {
						switch {
						case w.Value.class == v.class:
							w.Value.passed = 0
						case w.Value.class > v.class:
							w.Value.passed++
							if w.Value.passed > m {
								t.Fatalf("maxPassOver %d, %d classes: a class-%d value passed over %d times", m, classes, w.Value.class, w.Value.passed)
							}
						}
					}
				default:
					if len(waiting) == 0 {
						continue
					}
					k := rng.IntN(len(waiting))
					if !q.Remove(waiting[k]) {
						t.Fatal("Remove of a waiting item reported false")
					}
					waiting = slices.Delete(waiting, k, k+1)
				}
				if q.Len() != len(waiting) {
					t.Fatalf("Len %d, %d waiting", q.Len(), len(waiting))
				}
			}
		}
	}
}
