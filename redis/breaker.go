package reboundredis

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/redis/go-redis/v9"
)

// Breaker is a circuit breaker whose state lives in Redis, shared by every
// Breaker of the same name on the same Store prefix: one view of a
// target's health for the whole fleet. It satisfies rebound.Breaker; set
// it as Policy.Breaker. It is safe for concurrent use. Make one with
// NewBreaker.
//
// It follows the rules of package breaker, with the fleet as one caller:
//
//   - Failures in a row are counted across replicas; a success resets the
//     count. A success writes only when the count was above zero at its
//     Allow, so that the closed path's Done costs no round trip.
//   - The failure rate is over the window's calls, counted when they are
//     allowed, not when they end: a call whose outcome says nothing of the
//     provider (a 400, a cancellation) counts as one that did not fail, and
//     so does one still in flight.
//   - One replica's trip opens the breaker for all, by their next Allow.
//     While a replica knows the breaker is open (it was refused, or tripped
//     it), it refuses until the cooldown ends without asking Redis.
//   - After the cooldown at most Config.Probes probes are in flight in the
//     whole fleet. A probe's slot is a lease that ends after
//     Config.ProbeTimeout, so that a replica that dies holding one frees it.
//     Config.Successes probe successes close the breaker for all; one
//     failure opens it again.
//   - An open or half-open breaker is remembered for a day past its
//     cooldown and its probes' leases, so that one no replica asks about
//     for a while is still open, or half-open, when asked: only probes go
//     first. A closed one's count of failures in a row is forgotten after
//     Cooldown+ProbeTimeout without a failure.
//
// A permit says whether it is a probe and which, or the generation of the
// state it was issued under, so that a permit from an earlier state or an
// expired lease moves nothing. Time is the Redis server's, so the
// replicas' clocks may disagree; Config.Clock is used only by the local
// breaker.
//
// Allow is one round trip to Redis; Done is one when it must write (a
// failure, a probe's end, a success that resets a count), none otherwise.
// While Redis is away, a local breaker.Breaker with the same Config
// decides, on what this process alone has seen since it last decided; an
// outcome that cannot reach Redis is lost, and a probe's slot it would have
// freed waits for its lease to end. Config.OnStateChange hears the changes
// this replica makes, shared or local, not those it learns of.
//
// An Allow whose answer does not come in time may still run on Redis
// later (a Redis that stalled and resumed, a reply slower than the
// timeout), and take a probe's slot that no one holds. So a probe's ticket
// is made here, not on Redis: the Breaker remembers the tickets of the
// last few Allows whose answer was lost, and its next round trip that
// reaches Redis releases their leases, if they were taken, before it
// decides. Until then, or if a lost Allow reaches Redis after that, such
// a lease lasts until it ends.
type Breaker struct {
	store *Store
	name  string
	cfg   breaker.Config   // defaults applied
	local *breaker.Breaker // decides while Redis is away
	keys  []string         // the state, the window, the probes' leases
	args  []any            // cfg, as the scripts read it
	born  time.Time
	// openUntil is when, measured from born on the monotonic clock, the
	// shared breaker is known to be open until; zero if it is not known.
	openUntil atomic.Int64

	mu      sync.Mutex // guards orphans
	orphans []uint64   // tickets of Allows whose answer was lost, oldest first
}

// maxOrphans bounds the tickets a Breaker keeps to release: more Allows
// lost at once than this are a Redis away, whose leases end by themselves.
const maxOrphans = 8

// A permit's lowest two bits say what it is; the rest is the generation of
// the closed state, a probe's ticket, or the local breaker's permit.
const (
	permitClosed  = iota // closed, no failures in a row: a success writes nothing
	permitCounted        // closed, failures in a row counted: a success resets them
	permitProbe          // a half-open probe
	permitLocal          // the local breaker's, issued while Redis was away
)

// NewBreaker returns a Breaker named name on s, by the rules of cfg, whose
// zero value is breaker's defaults. Every replica should give the same
// name the same cfg: each goes by its own. It panics if s is nil, a
// mistake in the program rather than a state of Redis.
func NewBreaker(s *Store, name string, cfg breaker.Config) *Breaker {
	if s == nil {
		panic("reboundredis: NewBreaker: the Store is nil")
	}
	local := breaker.New(name, cfg)
	cfg = local.Config()
	// The three keys share a hash tag, so that a cluster keeps them in one
	// slot.
	tag := hashTag(name)
	return &Breaker{
		store: s, name: name, cfg: cfg, local: local, born: time.Now(),
		keys: []string{s.key("breaker", tag), s.key("breaker", tag, "window"), s.key("breaker", tag, "probes")},
		args: []any{
			ms(cfg.Cooldown), cfg.Probes, ms(cfg.ProbeTimeout),
			max(cfg.ConsecutiveFailures, 0), strconv.FormatFloat(max(cfg.FailureRate, 0), 'g', -1, 64),
			cfg.MinCalls, ms(cfg.Window), cfg.Successes,
			// A closed state's count of failures in a row lives through a
			// cooldown and a probe's lease, for want of a failure to renew
			// it; an open or half-open state a day longer, so that a quiet
			// spell does not close it.
			ms(cfg.Cooldown + cfg.ProbeTimeout), ms(cfg.Cooldown + cfg.ProbeTimeout + 24*time.Hour),
		},
	}
}

// Name returns the breaker's name.
func (b *Breaker) Name() string { return b.name }

// Allow asks to make one attempt now. It returns a permit to hand back to
// Done, or a *breaker.OpenError (which wraps breaker.ErrOpen).
func (b *Breaker) Allow() (rebound.Permit, error) {
	now := time.Now()
	if until := time.Duration(b.openUntil.Load()); until > now.Sub(b.born) {
		return 0, &breaker.OpenError{Name: b.name, State: breaker.Open, Until: b.born.Add(until)}
	}
	ticket := newTicket()
	res, err := b.run(allowScript, ticket)
	if errors.Is(err, ErrUnavailable) && err != ErrUnavailable {
		// Sent, but not answered (run returns ErrUnavailable bare when it
		// did not try Redis): the script may yet run and lease a slot.
		b.keep([]uint64{ticket})
	}
	if err != nil {
		return b.allowLocal()
	}
	r, ok := ints(res, 1)
	switch {
	case !ok:
	case r[0] == allowFull:
		return 0, &breaker.OpenError{Name: b.name, State: breaker.HalfOpen}
	case r[0] == allowClosed && len(r) == 3:
		tag := uint64(permitClosed)
		if r[2] > 0 {
			tag = permitCounted
		}
		return rebound.Permit(uint64(r[1])<<2 | tag), nil
	case r[0] == allowOpen && len(r) == 2:
		until := b.knownOpen(now, time.Duration(r[1])*time.Millisecond)
		return 0, &breaker.OpenError{Name: b.name, State: breaker.Open, Until: until}
	case r[0] == allowProbe && len(r) == 2:
		if r[1] == 1 {
			b.notify(breaker.Open, breaker.HalfOpen, "cooldown over")
		}
		return rebound.Permit(ticket<<2 | permitProbe), nil
	}
	b.store.unreadable(res)
	return b.allowLocal()
}

// allowLocal asks the local breaker, Redis having given no answer.
func (b *Breaker) allowLocal() (rebound.Permit, error) {
	p, err := b.local.Allow()
	return rebound.Permit(uint64(p)<<2 | permitLocal), err
}

// Done reports how an attempt allowed with permit p ended.
func (b *Breaker) Done(p rebound.Permit, o rebound.Outcome) {
	id := uint64(p) >> 2
	kind := "closed"
	switch uint64(p) & 3 {
	case permitLocal:
		b.local.Done(rebound.Permit(id), o)
		return
	case permitProbe:
		kind = "probe"
	case permitCounted:
		if o == rebound.OutcomeIgnored {
			return
		}
	case permitClosed:
		if o != rebound.OutcomeFailure {
			return
		}
	}
	outcome := "ignored"
	switch o {
	case rebound.OutcomeSuccess:
		outcome = "success"
	case rebound.OutcomeFailure:
		outcome = "failure"
	}
	res, err := b.run(doneScript, kind, id, outcome)
	if err != nil {
		return
	}
	r, ok := ints(res, 1)
	if !ok {
		b.store.unreadable(res)
		return
	}
	now := time.Now()
	switch {
	case r[0] == doneTripped && len(r) == 2:
		b.knownOpen(now, b.cfg.Cooldown)
		b.notify(breaker.Closed, breaker.Open, fmt.Sprintf("%d failures in a row", r[1]))
	case r[0] == doneTrippedByRate && len(r) == 3:
		b.knownOpen(now, b.cfg.Cooldown)
		b.notify(breaker.Closed, breaker.Open, fmt.Sprintf("%d of %d calls failed in %v", r[1], r[2], b.cfg.Window))
	case r[0] == doneProbeFailed:
		b.knownOpen(now, b.cfg.Cooldown)
		b.notify(breaker.HalfOpen, breaker.Open, "a probe failed")
	case r[0] == doneClosed:
		b.notify(breaker.HalfOpen, breaker.Closed, fmt.Sprintf("%d probes succeeded", b.cfg.Successes))
	}
}

// run runs script with the config's arguments, then args, then the
// tickets of lost Allows, whose leases the script releases. Those tickets
// are kept for the next round trip if this one does not reach Redis.
func (b *Breaker) run(script *redis.Script, args ...any) (any, error) {
	b.mu.Lock()
	orphans := b.orphans
	b.orphans = nil
	b.mu.Unlock()
	all := make([]any, 0, len(b.args)+len(args)+len(orphans))
	all = append(append(all, b.args...), args...)
	for _, o := range orphans {
		all = append(all, o)
	}
	res, err := b.store.run(context.Background(), script, b.keys, all...)
	if errors.Is(err, ErrUnavailable) {
		b.keep(orphans)
	}
	return res, err
}

// keep adds tickets to those to release, forgetting the oldest beyond
// maxOrphans.
func (b *Breaker) keep(tickets []uint64) {
	if len(tickets) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.orphans = append(b.orphans, tickets...)
	if n := len(b.orphans) - maxOrphans; n > 0 {
		b.orphans = append(b.orphans[:0], b.orphans[n:]...)
	}
}

// newTicket returns a probe's ticket: random, so that neither a ticket of
// another replica nor one issued before the state last expired is ever
// the same; 62 bits, to fit in a permit.
func newTicket() uint64 {
	var buf [8]byte
	rand.Read(buf[:])
	return binary.LittleEndian.Uint64(buf[:]) >> 2
}

// knownOpen records that the shared breaker is open for left from now,
// and returns until when.
func (b *Breaker) knownOpen(now time.Time, left time.Duration) time.Time {
	b.openUntil.Store(int64(now.Sub(b.born) + left))
	return now.Add(left)
}

// notify tells Config.OnStateChange of a change this replica made.
func (b *Breaker) notify(from, to breaker.State, reason string) {
	if f := b.cfg.OnStateChange; f != nil {
		now := time.Now()
		if b.cfg.Clock != nil {
			now = b.cfg.Clock.Now()
		}
		f(breaker.Change{Name: b.name, From: from, To: to, At: now, Reason: reason})
	}
}

// ints reads a script's answer, a list of at least n integers.
func ints(res any, n int) ([]int64, bool) {
	list, ok := res.([]any)
	if !ok || len(list) < n {
		return nil, false
	}
	out := make([]int64, len(list))
	for i, v := range list {
		if out[i], ok = v.(int64); !ok {
			return nil, false
		}
	}
	return out, true
}

// The answers of the scripts, first in the list they return; doneScript
// answers {0} when the state did not change.
const (
	allowClosed       = 0 // {0, generation, failures in a row}
	allowOpen         = 1 // {1, ms of cooldown left}
	allowFull         = 2 // {2}: half-open, every probe slot leased
	allowProbe        = 3 // {3, 1 if this call ended the cooldown}: a probe with the ticket given
	doneTripped       = 1 // {1, failures in a row}
	doneTrippedByRate = 2 // {2, failures, calls}
	doneProbeFailed   = 3 // {3}
	doneClosed        = 4 // {4}
)

// breakerLib is what both scripts start with: their arguments, the
// server's time, and the two ways they change the state.
//
// KEYS: the state (a hash: st, 0 closed, 1 open, 2 half-open; gen, the
// state's generation; seq, the last generation issued; fails,
// failures in a row; opened, when it opened, in ms; succ, probe
// successes), the window (a hash of ten buckets: e<i> the stretch of time
// bucket i holds, c<i> its calls, f<i> its failures) and the probes'
// leases (a sorted set of tickets by when their lease ends, in ms).
// ARGV[1] to ARGV[10] are the config; each script's own arguments follow,
// then the tickets of lost Allows, whose leases release ends.
const breakerLib = `
local state, window, leases = KEYS[1], KEYS[2], KEYS[3]
local cooldown, probes, probeTimeout = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local consecutive, rate, minCalls = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local windowMs, successes = tonumber(ARGV[7]), tonumber(ARGV[8])
local closedTTL, openTTL = tonumber(ARGV[9]), tonumber(ARGV[10])
local buckets = 10
local width = math.max(math.floor(windowMs / buckets), 1)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- release ends the leases of the tickets in ARGV from first on.
local function release(first)
  for i = first, #ARGV do redis.call('ZREM', leases, ARGV[i]) end
end

-- move moves the breaker to st in a new generation. Generations are
-- numbered on from the server's time in microseconds when the state is
-- new, so that a permit issued before it last expired matches nothing
-- after.
local function move(st)
  redis.call('HSETNX', state, 'seq', tonumber(t[1]) * 1000000 + tonumber(t[2]))
  local gen = redis.call('HINCRBY', state, 'seq', 1)
  redis.call('HSET', state, 'st', st, 'gen', gen, 'succ', 0)
  redis.call('DEL', leases)
  if st == 1 then redis.call('HSET', state, 'opened', now) end
  if st == 0 then
    redis.call('HSET', state, 'fails', 0)
    redis.call('DEL', window)
  end
  if st == 0 then
    redis.call('PEXPIRE', state, closedTTL)
  else
    redis.call('PEXPIRE', state, openTTL)
  end
end

-- count adds one to field ('c' or 'f') of the window's current bucket,
-- emptied first if it held an older stretch of time.
local function count(field)
  local epoch = math.floor(now / width)
  local slot = epoch % buckets
  if tonumber(redis.call('HGET', window, 'e' .. slot)) ~= epoch then
    redis.call('HSET', window, 'e' .. slot, epoch, 'c' .. slot, 0, 'f' .. slot, 0)
  end
  redis.call('HINCRBY', window, field .. slot, 1)
  redis.call('PEXPIRE', window, windowMs)
end
`

// allowScript decides an Allow: ARGV[11] is the ticket its probe would
// have.
var allowScript = redis.NewScript(breakerLib + `
release(12)
local h = redis.call('HMGET', state, 'st', 'gen', 'fails', 'opened')
local st = tonumber(h[1]) or 0
if st == 0 then
  if rate > 0 then count('c') end
  return {0, tonumber(h[2]) or 0, tonumber(h[3]) or 0}
end
local entered = 0
if st == 1 then
  local left = tonumber(h[4]) + cooldown - now
  if left > cooldown then
    -- The server's clock went back: the cooldown starts again from now
    -- rather than lasting as long as the step back.
    redis.call('HSET', state, 'opened', now)
    left = cooldown
  end
  if left > 0 then return {1, left} end
  move(2)
  entered = 1
end
redis.call('ZREMRANGEBYSCORE', leases, '-inf', now)
if redis.call('ZCARD', leases) >= probes then return {2} end
redis.call('ZADD', leases, now + probeTimeout, ARGV[11])
redis.call('PEXPIRE', leases, probeTimeout)
redis.call('PEXPIRE', state, openTTL)
return {3, entered}
`)

// doneScript records an outcome: ARGV[11] is the permit's kind ("closed"
// or "probe"), ARGV[12] its generation or ticket (compared as text: Lua's
// numbers would round them), ARGV[13] the outcome ("success", "failure" or
// "ignored").
var doneScript = redis.NewScript(breakerLib + `
release(14)
local kind, id, outcome = ARGV[11], ARGV[12], ARGV[13]
local h = redis.call('HMGET', state, 'st', 'gen')
local st, gen = tonumber(h[1]) or 0, h[2] or '0'
if kind == 'probe' then
  if redis.call('ZREM', leases, id) == 0 or st ~= 2 then return {0} end
  if outcome == 'success' then
    if redis.call('HINCRBY', state, 'succ', 1) < successes then return {0} end
    move(0)
    return {4}
  elseif outcome == 'failure' then
    move(1)
    return {3}
  end
  return {0}
end
if st ~= 0 or gen ~= id then return {0} end
if outcome == 'success' then
  -- A state that expired holds no failures to reset: writing it again
  -- would make a key without an expiry.
  if redis.call('EXISTS', state) == 1 then redis.call('HSET', state, 'fails', 0) end
  return {0}
end
if outcome ~= 'failure' then return {0} end
local n = redis.call('HINCRBY', state, 'fails', 1)
redis.call('PEXPIRE', state, closedTTL)
if consecutive > 0 and n >= consecutive then
  move(1)
  return {1, n}
end
if rate > 0 then
  count('f')
  local epoch = math.floor(now / width)
  local w = redis.call('HGETALL', window)
  local f = {}
  for i = 1, #w, 2 do f[w[i]] = tonumber(w[i + 1]) end
  local calls, failures = 0, 0
  for slot = 0, buckets - 1 do
    local e = f['e' .. slot]
    if e and epoch - e >= 0 and epoch - e < buckets then
      calls = calls + (f['c' .. slot] or 0)
      failures = failures + (f['f' .. slot] or 0)
    end
  end
  if calls >= minCalls and failures >= rate * calls then
    move(1)
    return {2, failures, calls}
  end
end
return {0}
`)
