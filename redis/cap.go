package reboundredis

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
)

// Period is how long a Cap's spend adds up before it starts again.
type Period int

// The periods of a Cap, in UTC.
const (
	Day   Period = iota // from midnight to midnight
	Month               // from the first of the month to the first of the next
)

// DefaultCapLease is how long a hold, and a replica's local share, lasts
// on Redis without word from its replica, for a zero CapConfig.Lease.
const DefaultCapLease = 10 * time.Minute

// CapConfig configures a Cap. Its zero value allows nothing: set USD.
type CapConfig struct {
	// USD is the cap for each period, in US dollars. Zero allows nothing.
	USD float64
	// Period is the period the cap is for, in UTC. Zero means Day.
	Period Period
	// Replicas is how many processes share the cap, each with its own Cap
	// of the same name and config: each may spend 1/Replicas of what is
	// left without Redis (see Cap). Too low a count lets an outage pass
	// the cap; too high only makes each share smaller. Zero means 1.
	Replicas int
	// Lease is how long a hold, and a replica's local share, stays on
	// Redis without word from its replica: a replica that dies frees
	// them after at most that long. It must outlast the longest attempt:
	// an attempt that settles after its hold's lease has ended is
	// counted, but others may have reserved its hold meanwhile. Zero means
	// DefaultCapLease (10 minutes).
	Lease time.Duration
	// Clock tells the period: a day or a month starts at midnight UTC by
	// it. Nil means the system clock. Leases go by the Redis server's
	// clock.
	Clock rebound.Clock
}

// Cap is a spend cap shared on Redis by the replicas of a service: a
// tenant's or a key's spend for a day or a month. It is a cost.Cap, for
// cost.WithCaps. It is safe for concurrent use. Make one per process
// with Store.Cap.
//
// An attempt reserves what it may cost before it is sent, in one Lua
// script: the reservation is held if spent + held + what it asks stays
// within the cap, and refused with a *cost.CapError otherwise; its Settle
// moves the hold to spent at the real amount. Amounts are whole
// micro-dollars on Redis (rounded up, so that float sums do not drift and
// no rounding spends more than the cap). A hold lasts CapConfig.Lease on
// Redis: the holds of a replica that died stop counting after at most
// that long.
//
// The period is the caller's: a day rolls over at midnight UTC by
// CapConfig.Clock, each period on keys of its own, which expire a lease
// and an hour after the period ends. Replicas whose clocks disagree by s
// count an attempt made within s of midnight against either day; each
// day's key still keeps its cap.
//
// # Without Redis
//
// While Redis is away a replica spends on its share, never without a
// limit. Each replica keeps a share of the cap on Redis, like a hold, so
// that no other replica can reserve it: at each of its decisions the
// script gives it max(what it keeps, (cap − spent − held − the other
// shares) / Replicas). While Redis is away the replica may hold and spend
// up to its share, locally, until the share's lease would end; what it
// spends so is added to Redis's spent exactly once (a marker per batch
// makes a resent batch count once) by its next decision that reaches
// Redis.
//
// Why the replicas together cannot pass the cap: the script keeps
// spent + held + Σ shares ≤ cap on Redis, since it grants a hold or a
// share only when they fit. A replica never believes its share larger
// than Redis keeps it: it lowers its belief itself, before the call that
// may lower Redis's figure, and raises it only from that call's answer,
// one such call in flight at a time; a lost answer leaves Redis's figure
// at least the belief. Its local holds, and its local spend not yet on
// Redis, stay within its belief. So when Redis goes away (for some
// replicas or all), what can still be spent is what Redis holds, settled
// at no more than held, plus each replica's local spend, at most its
// share: spent + held + Σ shares ≤ cap. Two things can pass the cap:
// an attempt that costs more than it reserved (as with cost.Limit), and
// an attempt, or a replica cut off from Redis, that outlasts the lease.
//
// The shares keep a part of what is left from the shared decisions: with
// every replica deciding, about half of it in all. A reservation is
// refused once what it asks is more than about half of what is left,
// so the cap is used to within a few attempts' cost. A replica that
// stops deciding keeps its share until its lease ends.
//
// The cap lives as long as Redis keeps its data: a Redis restarted
// without persistence forgets the period's spend.
type Cap struct {
	store    *Store
	name     string
	limit    int64 // the cap in micro-dollars
	replicas int64
	lease    time.Duration
	period   Period
	now      func() time.Time
	id       string // this replica's, naming its share on Redis

	mu      sync.Mutex           // guards periods
	periods map[string]*capState // the current period's, and older ones with work left
}

// capState is a Cap's local state for one period.
type capState struct {
	keys []string // the period's hash and its leases
	// updating is set while a call that may move the share is in flight:
	// one at a time (see Cap).
	updating atomic.Bool

	mu         sync.Mutex    // guards the fields below
	expiry     time.Duration // how long the keys are to live, from the last decision
	share      int64         // what this replica believes its share: no more than Redis keeps
	shareUntil time.Time     // when the share's lease may end, by this process's clock
	localHeld  int64         // holds made without Redis
	unsent     int64         // spent without Redis, in no batch yet
	batch      capItem       // spent without Redis, sent and not yet acknowledged (member "" for none)
	settles    []capItem     // Redis holds settled without Redis
	// The figures of the last answer: spent, held, and the shares of
	// the others.
	spent, held, others int64
}

// capItem is a settle Redis has still to hear: a hold's member ("h:id")
// or a batch's ("f:id"), and its amount.
type capItem struct {
	member string
	micros int64
}

// maxSettles bounds the settles of Redis holds kept for Redis; past it
// their amounts go with local spend, counted against the share.
const maxSettles = 64

// Cap returns the Cap named name (a tenant, a key, a team) on s, by cfg.
// Every replica should give the same name the same cfg.
func (s *Store) Cap(name string, cfg CapConfig) *Cap {
	c := &Cap{
		store:    s,
		name:     name,
		limit:    micros(cfg.USD),
		replicas: int64(max(cfg.Replicas, 1)),
		lease:    cfg.Lease,
		period:   cfg.Period,
		now:      time.Now,
		id:       randomID(),
		periods:  make(map[string]*capState),
	}
	if c.lease <= 0 {
		c.lease = DefaultCapLease
	}
	if cfg.Clock != nil {
		c.now = cfg.Clock.Now
	}
	return c
}

// randomID returns 16 random hex digits.
func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// micros returns usd in whole micro-dollars, rounded up: a reservation or
// a spend is never counted below what it is. The slack absorbs float
// error, so that 0.021 is 21000, not 21001.
func micros(usd float64) int64 {
	if usd <= 0 {
		return 0
	}
	return int64(math.Ceil(usd*1e6 - 1e-6))
}

func dollars(m int64) float64 { return float64(m) / 1e6 }

// state returns the current period's state, making it when the period
// starts.
func (c *Cap) state() *capState {
	now := c.now().UTC()
	var (
		name string
		end  time.Time
	)
	if c.period == Month {
		name = now.Format("2006-01")
		end = time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC)
	} else {
		name = now.Format("2006-01-02")
		end = time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	}
	c.mu.Lock()
	st := c.periods[name]
	if st == nil {
		// One hash tag, so that a cluster keeps a period's keys in one
		// slot.
		k := c.store.key("cap", hashTag(c.name), name)
		st = &capState{keys: []string{k, k + ":leases"}}
		c.periods[name] = st
	}
	c.mu.Unlock()
	st.mu.Lock()
	st.expiry = end.Sub(now) + c.lease + time.Hour
	st.mu.Unlock()
	return st
}

// Reserve holds usd of the cap for one attempt, or refuses it with a
// *cost.CapError whose figures are the shared ones (Held counts the other
// replicas' shares too), or this replica's while Redis is away.
func (c *Cap) Reserve(ctx context.Context, usd float64) (cost.Hold, error) {
	st := c.state()
	need := micros(usd)
	hold := "h:" + randomID()
	res, err := c.decide(ctx, st, "reserve", need, hold, nil)
	if err != nil {
		return c.reserveLocal(st, need)
	}
	c.flushOlder(ctx, st)
	if res.ok {
		return &capHold{c: c, st: st, member: hold}, nil
	}
	return nil, &cost.CapError{Cap: c.name, Limit: dollars(c.limit), Spent: dollars(res.spent), Held: dollars(res.held), Need: dollars(need)}
}

// Spent returns what the current period has spent, in US dollars: the
// settled spend of every replica, as Redis counts it, plus what this
// replica settled while Redis was away and has yet to send. Holds not yet
// settled are not in it. While Redis is away (or does not answer within
// 50 ms, or the store's Timeout if longer) it returns this replica's
// local view, the figure of Redis's last answer plus its own unsent
// spend (at most: a send whose answer was lost may be on Redis already),
// with an error wrapping ErrUnavailable. It is a read for a person
// (a status page), not a decision: it asks Redis even while the store
// deems it away, and changes nothing there.
func (c *Cap) Spent(ctx context.Context) (float64, error) {
	st := c.state()
	// What Redis may not have heard: the settles and the batch sent
	// without an answer, which the script counts unless Redis has them
	// already, and the spend in no batch yet, which it has not.
	st.mu.Lock()
	pending := make([]any, 0, 2*len(st.settles)+2)
	unsent := st.unsent
	local := unsent
	for _, it := range append(st.settles[:len(st.settles):len(st.settles)], st.batch) {
		if it.member != "" {
			pending = append(pending, it.member, it.micros)
			local += it.micros
		}
	}
	lastHeard := st.spent
	st.mu.Unlock()

	res, err := c.store.read(ctx, capSpentScript, st.keys[:1], pending...)
	if err != nil {
		return dollars(lastHeard + local), err
	}
	n, ok := res.(int64)
	if !ok {
		return dollars(lastHeard + local), fmt.Errorf("%w: an answer that is not a spend: %.100v", ErrUnavailable, res)
	}
	return dollars(n + unsent), nil
}

// flushOlder sends what Redis has yet to hear of periods before current,
// Redis having just answered, and forgets the periods with nothing left
// to send or settle.
func (c *Cap) flushOlder(ctx context.Context, current *capState) {
	c.mu.Lock()
	if len(c.periods) == 1 {
		c.mu.Unlock()
		return
	}
	var older []*capState
	for _, st := range c.periods {
		if st != current {
			older = append(older, st)
		}
	}
	c.mu.Unlock()
	for _, st := range older {
		st.mu.Lock()
		pending := st.batch.member != "" || st.unsent > 0 || len(st.settles) > 0
		st.mu.Unlock()
		if pending {
			c.decide(ctx, st, "settle", 0, "", nil)
		}
		st.mu.Lock()
		done := st.batch.member == "" && st.unsent == 0 && len(st.settles) == 0 && st.localHeld == 0
		st.mu.Unlock()
		if done {
			c.mu.Lock()
			maps.DeleteFunc(c.periods, func(_ string, s *capState) bool { return s == st })
			c.mu.Unlock()
		}
	}
}

// reserveLocal decides without Redis, on the replica's share.
func (c *Cap) reserveLocal(st *capState, need int64) (cost.Hold, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	used := st.localHeld + st.unsent + st.batch.micros
	if time.Now().Before(st.shareUntil) && used+need <= st.share && (need > 0 || used < st.share) {
		st.localHeld += need
		return &capHold{c: c, st: st, local: need}, nil
	}
	return nil, &cost.CapError{Cap: c.name, Limit: dollars(c.limit),
		Spent: dollars(st.spent + st.unsent + st.batch.micros), Held: dollars(st.held + st.others + st.share), Need: dollars(need)}
}

// capHold is a hold on Redis (member set) or on the replica's share.
type capHold struct {
	c      *Cap
	st     *capState
	member string
	local  int64
	once   sync.Once
}

// Settle moves the hold to spent at usd: on Redis, or, for a hold made
// without Redis or while Redis is away, locally until the replica's next
// decision that reaches Redis.
func (h *capHold) Settle(usd float64) {
	h.once.Do(func() {
		spent := micros(usd)
		if h.member == "" {
			h.st.mu.Lock()
			defer h.st.mu.Unlock()
			h.st.localHeld -= h.local
			h.st.unsent += spent
			return
		}
		if _, err := h.c.decide(context.Background(), h.st, "settle", 0, "", []capItem{{h.member, spent}}); err != nil {
			h.st.mu.Lock()
			defer h.st.mu.Unlock()
			if len(h.st.settles) > maxSettles {
				// Too many to keep apart: counted against the share,
				// and twice on Redis until the hold's lease ends.
				h.st.settles = h.st.settles[:len(h.st.settles)-1]
				h.st.unsent += spent
			}
		}
	})
}
