package tool

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
)

// Records keeps what became of tool calls with side effects, by their
// idempotency key (IdempotencyKeyOf), so that a call made again, by an
// agent loop that replays a step, by another replica or after a restart,
// is answered from its record instead of being made twice. MemoryRecords
// keeps them in one process; package reboundredis shares them between
// replicas.
//
// A key is claimed with a lease while its call runs, and the lease is
// renewed while the call lasts; a key whose lease ran out without a record
// had a holder that died, and its next claimant is told that the outcome
// of that earlier run is unknown.
//
// Extend, Complete and Release report an error when the claim is no
// longer the caller's (its lease ran out and another claimed the key) or
// the records cannot be reached; Execute then carries on, and returns the
// call's own result.
type Records interface {
	// Claim claims key for a run whose lease lasts lease (positive) unless
	// renewed. It returns the key's record if it has one; else a token, if
	// the caller now holds the key; else neither: another holder's lease is
	// live.
	Claim(ctx context.Context, key string, lease time.Duration) (Claim, error)
	// Extend renews the caller's claim on key for lease from now.
	Extend(ctx context.Context, key, token string, lease time.Duration) error
	// Complete records the outcome of the caller's run of key, which ends
	// its claim.
	Complete(ctx context.Context, key, token string, rec Record) error
	// Release gives key up without a record, so that the call may be made
	// again. A key whose earlier run is of unknown outcome stays marked so.
	Release(ctx context.Context, key, token string) error
}

// Claim is what Records.Claim found: a record to answer from, or a claim
// on the key (Token), or, when both are empty, another holder's live
// lease.
type Claim struct {
	// Record is the key's record, if it has one.
	Record *Record
	// Token, when set, is the caller's claim on the key, for Extend,
	// Complete and Release.
	Token string
	// PriorRunUnknown is set with a Token when the key was claimed before
	// and its holder's lease ran out without a record: that run may or may
	// not have taken effect. It is set with a Record when the run that the
	// record is of was such a claimant's.
	PriorRunUnknown bool
}

// Record is the outcome of a call as Records keep it: its output, or the
// Failure it ended with. Its JSON form is how a shared store keeps it.
type Record struct {
	Output  string   `json:"output,omitempty"`
	Failure *Failure `json:"failure,omitempty"`
}

// clone returns a copy of rec that shares no Failure with it, so that a
// caller changing its Result cannot change the record.
func (rec Record) clone() *Record {
	if rec.Failure != nil {
		f := *rec.Failure
		rec.Failure = &f
	}
	return &rec
}

// Defaults of a zero Registry's recording and of a zero MemoryRecords.
const (
	DefaultLease      = 10 * time.Second
	DefaultWait       = 10 * time.Second
	DefaultRecordTTL  = 24 * time.Hour
	DefaultMaxRecords = 10000
)

// ErrInProgress is the error of a call whose key another holder has
// claimed and not finished within Registry.Wait: the call may be taking
// effect there, so it is not made here.
var ErrInProgress = errors.New("tool: the same call is in progress elsewhere")

// ErrRecorded is the error of a call answered from the record of an
// earlier run that failed.
var ErrRecorded = errors.New("tool: answered from the record of an earlier run")

// The waits for a held key start short, for a call about to end, and grow
// to a bound, so that many waiters poll a shared store gently.
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 250 * time.Millisecond
)

// recorded runs call under records: answered from its record if it has
// one; else, once its key is claimed, made, and its outcome recorded.
func (r *Registry) recorded(ctx context.Context, e *entry, call Call, records Records) Result {
	key := IdempotencyKeyOf(call)
	lease := r.Lease
	if lease <= 0 {
		lease = DefaultLease
	}
	wait := r.Wait
	if wait == 0 {
		wait = DefaultWait
	}
	c, err := claim(ctx, records, key, lease, wait)
	switch {
	case errors.Is(err, ErrInProgress):
		v := rebound.KindTransient
		if ctx.Err() != nil {
			v = rebound.KindCanceled
		}
		res := refusal(call, err, v, "The same call is being made elsewhere and has not finished; it may take effect. Check later whether it did before calling it again.")
		res.Failure.MayHaveTakenEffect = true
		return res
	case err != nil:
		return refusal(call, fmt.Errorf("tool: checking the call's record: %w", err), rebound.KindTransient,
			"The call was not made: its record could not be checked. Try again later.")
	case c.Record != nil:
		res := Result{Call: call, Output: c.Record.Output, Failure: c.Record.Failure, Recorded: true, PriorRunUnknown: c.PriorRunUnknown}
		if res.Failure != nil {
			res.Err = fmt.Errorf("%w: %s", ErrRecorded, res.Failure.Error)
		}
		return res
	}
	res, v := e.renewing(ctx, call, key, records, c.Token, lease)
	// Recorded even when the caller has gone: a lost record would let the
	// call be made again.
	bg := context.WithoutCancel(ctx)
	switch {
	// Success, a doubt that no one may settle by trying again, and a
	// failure that the same arguments would meet again are kept.
	case res.Failure == nil || res.Failure.MayHaveTakenEffect || v == rebound.KindPermanent || v == rebound.KindContextOverflow:
		records.Complete(bg, key, c.Token, Record{Output: res.Output, Failure: res.Failure})
	default:
		// A refusal that did nothing (a rate limit, a spent quota) may
		// succeed later or elsewhere.
		records.Release(bg, key, c.Token)
	}
	res.PriorRunUnknown = c.PriorRunUnknown
	return res
}

// claim claims key, waiting up to wait while another holder's lease is
// live; a negative wait does not wait. The wait goes by real time, like a
// hedge's: the holder it waits for runs in real time, whatever clock the
// call's retries go by.
func claim(ctx context.Context, records Records, key string, lease, wait time.Duration) (Claim, error) {
	deadline := time.Now().Add(wait)
	for poll := firstPoll; ; poll = min(2*poll, maxPoll) {
		c, err := records.Claim(ctx, key, lease)
		if err != nil || c.Record != nil || c.Token != "" {
			return c, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Claim{}, ErrInProgress
		}
		t := time.NewTimer(min(poll, left))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Claim{}, fmt.Errorf("%w; stopped waiting: %w", ErrInProgress, context.Cause(ctx))
		}
	}
}

// renewing runs call while renewing its claim every third of the lease,
// on a real timer for the reason claim waits on one, so that a live holder
// keeps the key however long the call takes. The renewal ends with the
// call, a panic included; a panicking call leaves its claim to expire, as
// a dead holder's would.
func (e *entry) renewing(ctx context.Context, call Call, key string, records Records, token string, lease time.Duration) (Result, rebound.Kind) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		t := time.NewTicker(max(lease/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-t.C:
				records.Extend(rctx, key, token, lease)
			case <-rctx.Done():
				return
			}
		}
	})
	return e.run(ctx, call, key)
}

// MemoryRecords are Records in this process's memory: they keep a replica
// from repeating its own calls, not another replica's. The zero value is
// ready to use. Leases and TTLs go by the real clock, as the holders they
// time run in real time. It is safe for concurrent use.
type MemoryRecords struct {
	// TTL is how long a key's record is kept. Zero means
	// DefaultRecordTTL (24 h).
	TTL time.Duration
	// Max bounds the keys kept; past it the oldest claimed is forgotten
	// first, record or not. Zero means DefaultMaxRecords (10 000).
	Max int

	mu    sync.Mutex // guards keys, order and seq
	keys  map[string]*memRecord
	order []memKey // keys in the order they were claimed, oldest first, stale ones included
	seq   uint64   // the last claim's number
}

// memRecord is one key's state: a record, or a claim until its lease ends.
type memRecord struct {
	seq      uint64    // the claim that made the entry, for telling stale order entries
	rec      *Record   // nil while claimed
	token    string    // the holder's token while claimed
	until    time.Time // the lease's end while claimed
	expires  time.Time // when the entry is forgotten
	doubtful bool      // an earlier holder's lease ran out without a record
}

type memKey struct {
	key string
	seq uint64
}

// Claim claims key, or returns its record or nothing, as Records.Claim
// says.
func (m *MemoryRecords) Claim(ctx context.Context, key string, lease time.Duration) (Claim, error) {
	if lease <= 0 {
		return Claim{}, fmt.Errorf("tool: lease %v; want a positive one", lease)
	}
	now := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.keys[key]
	if r != nil && !now.Before(r.expires) {
		r = nil
	}
	switch {
	case r == nil:
		if m.keys == nil {
			m.keys = map[string]*memRecord{}
		}
		r = &memRecord{}
		m.keys[key] = r
	case r.rec != nil:
		return Claim{Record: r.rec.clone(), PriorRunUnknown: r.doubtful}, nil
	case r.token != "" && now.Before(r.until):
		return Claim{}, nil
	case r.token != "":
		r.doubtful = true
	}
	m.seq++
	r.seq, r.token, r.until = m.seq, strconv.FormatUint(m.seq, 10), now.Add(lease)
	r.expires = now.Add(max(m.ttl(), lease))
	m.order = append(m.order, memKey{key, m.seq})
	m.forget()
	return Claim{Token: r.token, PriorRunUnknown: r.doubtful}, nil
}

// Extend renews the caller's claim on key for lease from now.
func (m *MemoryRecords) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(key, token)
	if err != nil {
		return err
	}
	now := time.Now()
	r.until = now.Add(lease)
	r.expires = now.Add(max(m.ttl(), lease))
	return nil
}

// Complete records rec as the outcome of the caller's run of key.
func (m *MemoryRecords) Complete(ctx context.Context, key, token string, rec Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(key, token)
	if err != nil {
		return err
	}
	r.rec, r.token, r.expires = rec.clone(), "", time.Now().Add(m.ttl())
	return nil
}

// Release gives key up without a record.
func (m *MemoryRecords) Release(ctx context.Context, key, token string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, err := m.held(key, token)
	if err != nil {
		return err
	}
	if r.doubtful {
		// The doubt outlives the claim: the next claimant must hear it.
		r.token = ""
		return nil
	}
	delete(m.keys, key)
	return nil
}

// errNotHeld is what Extend, Complete and Release say of a claim that is
// no longer the caller's.
var errNotHeld = errors.New("tool: the claim is no longer held: its lease ran out, or its key was forgotten")

// held returns key's entry if token holds it.
func (m *MemoryRecords) held(key, token string) (*memRecord, error) {
	r := m.keys[key]
	if r == nil || r.token == "" || r.token != token {
		return nil, errNotHeld
	}
	return r, nil
}

func (m *MemoryRecords) ttl() time.Duration {
	if m.TTL > 0 {
		return m.TTL
	}
	return DefaultRecordTTL
}

// forget drops the oldest keys beyond Max, and the order's stale entries
// once they are as many as the live ones, so that both stay bounded.
func (m *MemoryRecords) forget() {
	limit := m.Max
	if limit <= 0 {
		limit = DefaultMaxRecords
	}
	for len(m.keys) > limit {
		k := m.order[0]
		m.order = m.order[1:]
		if r := m.keys[k.key]; r != nil && r.seq == k.seq {
			delete(m.keys, k.key)
		}
	}
	if len(m.order) > 2*len(m.keys)+16 {
		live := m.order[:0]
		for _, k := range m.order {
			if r := m.keys[k.key]; r != nil && r.seq == k.seq {
				live = append(live, k)
			}
		}
		m.order = live
	}
}
