package batch_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/rebound-go/rebound/batch"
	"github.com/rebound-go/rebound/batch/journaltest"
)

// memoryStore is a journal's state kept in memory, for the runner's tests:
// each open gives a new run's view of it, as a file or a database would.
// Every record is kept in the order it came, so that tests can see what
// was sent when.
type memoryStore struct {
	mu       sync.Mutex // guards the fields below
	digest   string
	ids      []string
	items    map[string]*memoryItem
	runs     int
	recorded []batch.Outcome
}

type memoryItem struct {
	state   batch.State
	outcome batch.Outcome // the last recorded, kept while the item is claimed again
	run     int           // the run that last recorded it, or holds it
	resend  bool          // claimed and never recorded by a run that stopped
}

func (m *memoryStore) open() (batch.Journal, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.runs++
	return &memoryJournal{m: m, run: m.runs}, nil
}

// memoryJournal is one run's view of a memoryStore.
type memoryJournal struct {
	m           *memoryStore
	run         int
	retryFailed bool
}

func (j *memoryJournal) Prepare(_ context.Context, in batch.Input, opt batch.Options) error {
	m := j.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.items == nil:
		m.digest, m.ids, m.items = in.Digest, slices.Clone(in.IDs), map[string]*memoryItem{}
		for _, id := range in.IDs {
			m.items[id] = &memoryItem{}
		}
	case m.digest != in.Digest:
		return fmt.Errorf("%w: %s, not %s", batch.ErrDifferentInput, m.digest, in.Digest)
	}
	for _, it := range m.items {
		if it.state == batch.InFlight { // its run is gone: one run at a time
			it.state, it.resend = batch.Pending, true
		}
	}
	j.retryFailed = opt.RetryFailed
	return nil
}

func (j *memoryJournal) Claim(_ context.Context, n int) ([]batch.Claim, error) {
	m := j.m
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []batch.Claim
	for _, id := range m.ids {
		if len(out) == n {
			break
		}
		it := m.items[id]
		earlier := it.run != j.run
		if it.state == batch.Pending || it.state == batch.Failed && earlier || it.state == batch.FailedPermanent && earlier && j.retryFailed {
			out = append(out, batch.Claim{ID: id, Resent: it.resend})
			it.state, it.run, it.resend = batch.InFlight, j.run, false
		}
	}
	return out, nil
}

func (j *memoryJournal) Record(_ context.Context, outcomes []batch.Outcome) error {
	m := j.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range outcomes {
		it := m.items[o.ID]
		if it == nil || it.state == batch.Succeeded {
			continue
		}
		m.recorded = append(m.recorded, o)
		it.state, it.run = o.State, j.run
		if o.State != batch.Pending {
			it.outcome = o
		}
	}
	return nil
}

func (j *memoryJournal) Outcomes(_ context.Context, fn func(batch.Outcome) error) error {
	m := j.m
	m.mu.Lock()
	var all []batch.Outcome
	for _, id := range m.ids {
		if it := m.items[id]; it.outcome.State >= batch.Succeeded { // recorded once, whatever its state now
			all = append(all, it.outcome)
		}
	}
	m.mu.Unlock()
	for _, o := range all {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

func (j *memoryJournal) Counts(context.Context) (batch.Counts, error) {
	m := j.m
	m.mu.Lock()
	defer m.mu.Unlock()
	c := batch.Counts{Total: len(m.ids)}
	for _, it := range m.items {
		switch it.state {
		case batch.Pending:
			c.Pending++
		case batch.InFlight:
			c.InFlight++
		case batch.Succeeded:
			c.Succeeded++
		case batch.Failed:
			c.Failed++
		case batch.FailedPermanent:
			c.FailedPermanent++
		}
	}
	return c, nil
}

func (j *memoryJournal) Close() error {
	m := j.m
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, it := range m.items {
		if it.state == batch.InFlight && it.run == j.run {
			it.state, it.resend = batch.Pending, true
		}
	}
	return nil
}

// TestMemoryJournalKeepsTheContract holds the runner's test journal to
// the contract the real ones keep, and so checks the contract's tests
// against a journal simple enough to read at a glance.
func TestMemoryJournalKeepsTheContract(t *testing.T) {
	journaltest.Run(t, func(t *testing.T) journaltest.Opener { return (&memoryStore{}).open })
}
