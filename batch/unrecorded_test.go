package batch_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound/batch"
)

// awayJournal is a journal whose Records fail while its database is away.
type awayJournal struct {
	batch.Journal
	mu      sync.Mutex // guards the fields below
	away    bool
	refused int // Records refused while away
	backAt  int // the journal is back once it has refused this many; 0: never
}

var errAway = errors.New("the database is away")

func (j *awayJournal) goAway() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.away = true
}

func (j *awayJournal) Record(ctx context.Context, outcomes []batch.Outcome) error {
	j.mu.Lock()
	if j.away {
		j.refused++
		if j.refused == j.backAt {
			j.away = false
		}
		j.mu.Unlock()
		return errAway
	}
	j.mu.Unlock()
	return j.Journal.Record(ctx, outcomes)
}

// answering is an upstream that answers every request with a body naming
// its custom_id, and calls at, if set, before its nth answer.
func answering(at func(n int)) *served {
	var (
		mu sync.Mutex // guards n
		n  int
	)
	return &served{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		if at != nil {
			at(k)
		}
		w.Write([]byte(`{"answer":"ok"}`))
	})}
}

// TestAnswersAreRecordedWhenTheJournalComesBack: the journal fails
// Records for a while mid-run. The run stops sending, and the answers
// that came while it failed are not dropped: the run records them once
// the journal is back, before it returns.
func TestAnswersAreRecordedWhenTheJournalComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memoryStore{}
		open, _ := m.open()
		j := &awayJournal{Journal: open, backAt: 5}
		up := answering(func(n int) {
			if n == 30 {
				j.goAway()
			}
		})
		f := input(t, 100)
		r := &batch.Runner{BaseURL: "http://up", Base: up, Concurrency: 8, Policy: quick(1)}
		s, err := r.Run(t.Context(), f, j)
		j.Close()
		if !errors.Is(err, errAway) {
			t.Errorf("Run: %v; want the journal's error", err)
		}
		sent := up.take()
		c, _ := open.Counts(t.Context())
		if c.Succeeded != len(sent) || s.Succeeded != len(sent) {
			t.Errorf("%d ids answered, %d recorded (the run counts %d); want every answer recorded", len(sent), c.Succeeded, s.Succeeded)
		}
		if j.refused < 5 || len(sent) >= 100 {
			t.Errorf("the journal refused %d Records, and %d ids were sent; want the run stopped by the refusals", j.refused, len(sent))
		}
	})
}

// TestAnswersTheJournalCannotRecordAreKept: the journal fails every Record
// from some moment on. The run stops sending and returns the answers it
// received and could not record, bodies and all; the next run, given
// them, records them first and sends only the rest.
func TestAnswersTheJournalCannotRecordAreKept(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memoryStore{}
		open, _ := m.open()
		j := &awayJournal{Journal: open}
		up := answering(func(n int) {
			if n == 30 {
				j.goAway()
			}
		})
		f := input(t, 100)
		r := &batch.Runner{BaseURL: "http://up", Base: up, Concurrency: 8, Policy: quick(1)}
		s, err := r.Run(t.Context(), f, j)
		j.Close()
		if !errors.Is(err, errAway) {
			t.Errorf("Run: %v; want the journal's error", err)
		}
		first := up.take()
		c, _ := open.Counts(t.Context())
		if c.Succeeded+len(s.Unrecorded) != len(first) || len(s.Unrecorded) == 0 || s.Succeeded != c.Succeeded {
			t.Fatalf("%d ids answered: %d recorded, %d unrecorded (the run counts %d succeeded); want every answer recorded or returned",
				len(first), c.Succeeded, len(s.Unrecorded), s.Succeeded)
		}
		for _, o := range s.Unrecorded {
			if first[o.ID] != 1 || o.State != batch.Succeeded || string(o.Body) != `{"answer":"ok"}` {
				t.Errorf("unrecorded %+v (sent %d times); want an answer received, body and all", o, first[o.ID])
			}
		}

		r = &batch.Runner{BaseURL: "http://up", Base: up, Concurrency: 8, Policy: quick(1), Unrecorded: s.Unrecorded}
		next := run(t, r, f, m)
		second := up.take()
		for _, o := range s.Unrecorded {
			if second[o.ID] != 0 {
				t.Errorf("%s, whose answer was kept, was sent again", o.ID)
			}
		}
		j2, _ := m.open()
		defer j2.Close()
		if c, _ := j2.Counts(t.Context()); c.Succeeded != 100 || next.Succeeded != len(second) {
			t.Errorf("after the next run: %+v, the run %+v; want all 100 succeeded, %d of them by the run", c, next, len(second))
		}
		if len(first)+len(second) != 100 {
			t.Errorf("%d ids sent by the first run and %d by the next; want each of the 100 once", len(first), len(second))
		}
	})
}

// TestUnrecordedAnswersOfAnotherInputAreRefused: answers kept by a run
// of another input are not recorded as this one's.
func TestUnrecordedAnswersOfAnotherInputAreRefused(t *testing.T) {
	m := &memoryStore{}
	j, _ := m.open()
	defer j.Close()
	r := &batch.Runner{BaseURL: "http://up", Base: answering(nil), Unrecorded: []batch.Outcome{{ID: "not-in-the-input", State: batch.Succeeded}}}
	s, err := r.Run(t.Context(), input(t, 3), j)
	if err == nil || len(s.Unrecorded) != 1 {
		t.Errorf("Run: %v, %d unrecorded; want an error, and the answer given back", err, len(s.Unrecorded))
	}
	if c, _ := j.Counts(t.Context()); c.Succeeded != 0 {
		t.Errorf("counts %+v: something was recorded", c)
	}
}
