package reboundredis

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/tool"
)

// RecordsConfig says how long Records keep what they record.
type RecordsConfig struct {
	// TTL is how long a call's record is kept, and a key whose holder
	// died stays marked so. Zero means tool.DefaultRecordTTL (24 h).
	TTL time.Duration
	// MaxOutput bounds the output, in bytes, that a record keeps on Redis.
	// A call whose output is longer is recorded as made, without its
	// output: a repeat is not made again but fails, saying that the call
	// was made and its output was too large to keep (the replica that
	// made it still answers its own repeats with the output while it keeps
	// a record of its own). Zero means DefaultMaxOutput (1 MiB).
	MaxOutput int
}

// DefaultMaxOutput is the output a zero RecordsConfig keeps on Redis.
const DefaultMaxOutput = 1 << 20

// Records are tool.Records shared by the replicas of a service: set as a
// tool.Registry's Records, a call with side effects made on one replica is
// answered from its record on every other, and a call running on one is
// waited for by the others instead of being made twice.
//
// A key is a Redis hash under the Store's prefix: its record (the
// tool.Record as JSON, an output that is not UTF-8 in base64) for TTL, or,
// while its call runs, the holder's token and the end of its lease by the
// Redis server's clock. A claim, a renewal, a record and a release are one
// script each, one round trip bounded by the Store's Timeout, and by one
// more millisecond for each 64 KiB of a record written or read (a record
// longer than 64 KiB is read in a second round trip, timed for its
// length). A claim
// that finds a lease run out takes the key and says that the earlier run's
// outcome is unknown; the mark stays with the key, and with the record
// that replaces it, so that a repeat answered from that record is told
// too.
//
// A claim or a renewal carries the Redis server's time past which it is
// late (its sender decided without it, by the Store's Timeout) and then
// does nothing: a Redis that stalls and runs it later leaves no claim that
// nobody holds. The server's time is estimated from its earlier answers;
// the first claim reads it in a round trip of its own.
//
// While Redis is away, claims are decided by records in this process's
// memory (tool.MemoryRecords), which keep this replica from repeating its
// own calls but know nothing of the others': a call made again on another
// replica during an outage may be made twice. Records made during an
// outage stay on this replica and still answer its repeats once Redis is
// back. A key that Redis lost while its call ran (a restart) is claimed
// again by the holder's next renewal, and its record written when the run
// ends. A run whose record cannot be written on Redis, because Redis is
// away or another holder took the key after its lease ran out, is recorded
// on this replica only, and Complete says so. Redis 5 or later is needed.
//
// Records are safe for concurrent use.
type Records struct {
	store     *Store
	ttl       time.Duration
	maxOutput int
	local     tool.MemoryRecords
	// offset is how far, in microseconds, the Redis server's clock was
	// seen ahead of this process's at most (see heard); set is whether it
	// was seen yet.
	offset atomic.Int64
	set    atomic.Bool
}

// NewRecords returns Records on s.
func NewRecords(s *Store, cfg RecordsConfig) (*Records, error) {
	if s == nil {
		return nil, errors.New("reboundredis: NewRecords: the Store is nil")
	}
	if cfg.TTL < 0 || cfg.MaxOutput < 0 {
		return nil, fmt.Errorf("reboundredis: negative RecordsConfig.TTL (%v) or MaxOutput (%d)", cfg.TTL, cfg.MaxOutput)
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = tool.DefaultRecordTTL
	}
	maxOutput := cfg.MaxOutput
	if maxOutput == 0 {
		maxOutput = DefaultMaxOutput
	}
	return &Records{store: s, ttl: ttl, maxOutput: maxOutput, local: tool.MemoryRecords{TTL: ttl}}, nil
}

// A token says where its claim was taken: on Redis, or on this replica
// while Redis was away.
const (
	sharedToken = "r"
	localToken  = "l"
)

// nowMS sets now to the Redis server's time in milliseconds, so that every
// replica's lease is timed by one clock, and us to it in microseconds.
const nowMS = `local t = redis.call('TIME')
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(us / 1000)
`

// late is true when the script runs past ARGV[4], the server's time in
// microseconds by which its sender stopped waiting (0: no bound).
const late = `local late = tonumber(ARGV[4]) > 0 and us > tonumber(ARGV[4])
`

// inlineRecord is the longest record a claim's reply carries; a longer one
// is read in a round trip of its own, timed for its length.
const inlineRecord = 64 << 10

// claimScript: KEYS[1] the call's key; ARGV token, lease ms, TTL ms,
// deadline µs. Returns {µs, 'done', record, doubt}, {µs, 'long', length},
// {µs, 'held'}, {µs, 'late'} or {µs, 'claimed', doubt}.
var claimScript = redis.NewScript(nowMS + late + `
local f = redis.call('HMGET', KEYS[1], 'rec', 'tok', 'until', 'doubt')
local doubt = f[4] or '0'
if f[1] then
	if #f[1] > ` + fmt.Sprint(inlineRecord) + ` then return {us, 'long', #f[1]} end
	return {us, 'done', f[1], doubt}
end
if f[2] then
	if tonumber(f[3]) > now then return {us, 'held'} end
	doubt = '1'
end
if late then return {us, 'late'} end
redis.call('HSET', KEYS[1], 'tok', ARGV[1], 'until', now + tonumber(ARGV[2]), 'doubt', doubt)
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[2]), tonumber(ARGV[3])))
return {us, 'claimed', doubt}
`)

// readScript: KEYS[1]. Returns {record, doubt}, or nil.
var readScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'rec', 'doubt')
if not f[1] then return nil end
return {f[1], f[2] or '0'}
`)

// extendScript: KEYS[1]; ARGV token, lease ms, TTL ms, deadline µs.
// Returns 1 if the token holds the key, which it claims again if Redis
// lost it (a restart) and nobody else has.
var extendScript = redis.NewScript(nowMS + late + `
local f = redis.call('HMGET', KEYS[1], 'tok', 'rec')
if late or f[2] or (f[1] and f[1] ~= ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'tok', ARGV[1], 'until', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[2]), tonumber(ARGV[3])))
return 1
`)

// completeScript: KEYS[1]; ARGV token, record, TTL ms. Returns 1 if the
// record was written: the token held the key, or Redis lost it (a restart)
// and nobody else has. The key's doubt stays with its record.
var completeScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'tok', 'rec', 'doubt')
if f[2] or (f[1] and f[1] ~= ARGV[1]) then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'rec', ARGV[2], 'doubt', f[3] or '0')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
`)

// releaseScript: KEYS[1]; ARGV token. Returns 1 if the token held the
// key, which keeps only its doubt, if any.
var releaseScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'tok', 'doubt')
if f[1] ~= ARGV[1] then return 0 end
if f[2] == '1' then
	redis.call('HDEL', KEYS[1], 'tok', 'until')
else
	redis.call('DEL', KEYS[1])
end
return 1
`)

// errNotHeld is what Extend, Complete and Release say of a claim that is
// no longer the caller's.
var errNotHeld = errors.New("reboundredis: the claim is no longer held: its lease ran out and another claimed the key")

// errLate is what a claim hears of a script that ran after its sender
// stopped waiting, and so did nothing.
var errLate = errors.New("reboundredis: redis ran the claim too late")

// Claim claims key on Redis, or returns its record or nothing, as
// tool.Records.Claim says; while Redis is away, on this replica.
func (r *Records) Claim(ctx context.Context, key string, lease time.Duration) (tool.Claim, error) {
	// Claimed here first: a record kept here while Redis was away answers
	// at once, and this replica's own callers of one call do not race to
	// Redis. The local claim stands in for the shared one if Redis is away.
	lc, err := r.local.Claim(ctx, key, lease)
	if err != nil || lc.Token == "" {
		return lc, err
	}
	c, err := r.claim(ctx, key, lease)
	if errors.Is(err, ErrUnavailable) || errors.Is(err, errLate) {
		lc.Token = localToken + lc.Token
		return lc, nil
	}
	r.local.Release(ctx, key, lc.Token)
	if err != nil {
		return tool.Claim{}, err
	}
	if c.Token != "" {
		c.PriorRunUnknown = c.PriorRunUnknown || lc.PriorRunUnknown
	}
	return c, nil
}

// claim claims key on Redis.
func (r *Records) claim(ctx context.Context, key string, lease time.Duration) (tool.Claim, error) {
	deadline, err := r.deadline(ctx)
	if err != nil {
		return tool.Claim{}, err
	}
	token := sharedToken + rand.Text()
	k := r.store.key("call", key)
	res, err := r.store.run(ctx, claimScript, []string{k}, token, ms(lease), ms(r.ttl), deadline)
	if err != nil {
		return tool.Claim{}, fmt.Errorf("reboundredis: claiming a call's key: %w", err)
	}
	reply, _ := res.([]any)
	r.heard(at(reply, 0))
	state, _ := at(reply, 1).(string)
	switch state {
	case "done":
		return decode(at(reply, 2), at(reply, 3))
	case "long":
		n, _ := at(reply, 2).(int64)
		res, err := r.store.runFor(ctx, r.store.payloadTimeout(int(n)), readScript, []string{k})
		if err == redis.Nil {
			return r.claim(ctx, key, lease) // the record's TTL ran out meanwhile
		}
		if err != nil {
			return tool.Claim{}, fmt.Errorf("reboundredis: reading a call's record: %w", err)
		}
		reply, _ := res.([]any)
		return decode(at(reply, 0), at(reply, 1))
	case "held":
		return tool.Claim{}, nil
	case "late":
		return tool.Claim{}, errLate
	case "claimed":
		return tool.Claim{Token: token, PriorRunUnknown: at(reply, 2) == "1"}, nil
	}
	return tool.Claim{}, fmt.Errorf("reboundredis: unexpected reply to a claim: %v", res)
}

// timeScript returns the Redis server's time in microseconds.
var timeScript = redis.NewScript(nowMS + `return us`)

// deadline returns the Redis server's time, in microseconds, past which a
// round trip starting now is late: the Store's Timeout from now. The
// server's clock is read once, by the first claim.
func (r *Records) deadline(ctx context.Context) (int64, error) {
	if !r.set.Load() {
		res, err := r.store.run(ctx, timeScript, nil)
		if err != nil {
			return 0, fmt.Errorf("reboundredis: reading the server's clock: %w", err)
		}
		r.heard(res)
	}
	return time.Now().Add(r.store.timeout).UnixMicro() + r.offset.Load(), nil
}

// heard learns the server's clock from an answer that carried its time.
// That time was taken before the answer reached this process, so each
// answer shows the clock less far ahead than it is, and the most seen is
// kept: a deadline errs early, never late. A clock seen to have moved back
// by more than the Store's Timeout is followed.
func (r *Records) heard(serverUS any) {
	us, ok := serverUS.(int64)
	if !ok {
		return
	}
	seen := us - time.Now().UnixMicro()
	for {
		old := r.offset.Load()
		if r.set.Load() && seen <= old && seen > old-r.store.timeout.Microseconds() {
			return
		}
		if r.offset.CompareAndSwap(old, seen) {
			r.set.Store(true)
			return
		}
	}
}

// Extend renews the caller's claim on key for lease from now.
func (r *Records) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	if t, ok := strings.CutPrefix(token, localToken); ok {
		return r.local.Extend(ctx, key, t, lease)
	}
	deadline, err := r.deadline(ctx)
	if err != nil {
		return err
	}
	return stillHeld(r.store.run(ctx, extendScript, []string{r.store.key("call", key)}, token, ms(lease), ms(r.ttl), deadline))
}

// Complete records rec as the outcome of the caller's run of key. If it
// cannot be recorded on Redis, rec is kept on this replica only, and an
// error says so.
func (r *Records) Complete(ctx context.Context, key, token string, rec tool.Record) error {
	if t, ok := strings.CutPrefix(token, localToken); ok {
		return r.local.Complete(ctx, key, t, rec)
	}
	b, err := r.encode(rec)
	if err != nil {
		return fmt.Errorf("reboundredis: %w", err)
	}
	err = stillHeld(r.store.runFor(ctx, r.store.payloadTimeout(len(b)), completeScript, []string{r.store.key("call", key)}, token, b, ms(r.ttl)))
	if err != nil {
		if c, _ := r.local.Claim(ctx, key, r.ttl); c.Token != "" {
			r.local.Complete(ctx, key, c.Token, rec)
		}
		return fmt.Errorf("reboundredis: the record is kept on this replica only: %w", err)
	}
	return nil
}

// Release gives key up without a record.
func (r *Records) Release(ctx context.Context, key, token string) error {
	if t, ok := strings.CutPrefix(token, localToken); ok {
		return r.local.Release(ctx, key, t)
	}
	return stillHeld(r.store.run(ctx, releaseScript, []string{r.store.key("call", key)}, token))
}

// stored is a record as Redis keeps it: tool.Record's JSON, but an output
// that is not UTF-8, which JSON would change, in base64.
type stored struct {
	tool.Record
	Bytes []byte `json:"output_bytes,omitempty"`
}

// encode returns rec as Redis keeps it, its output replaced by a failure
// saying so if it is longer than MaxOutput: the call was made, and a
// repeat must not make it again.
func (r *Records) encode(rec tool.Record) ([]byte, error) {
	if n := len(rec.Output); n > r.maxOutput {
		rec = tool.Record{Failure: &tool.Failure{
			Verdict:            rebound.KindPermanent.String(),
			Error:              fmt.Sprintf("the call was made, but its output (%d bytes) was longer than the %d bytes its record keeps", n, r.maxOutput),
			MayHaveTakenEffect: true,
			Advice:             "The call was made once already and is not made again; its output cannot be shown. Do not repeat it.",
		}}
	}
	s := stored{Record: rec}
	if !utf8.ValidString(rec.Output) {
		s.Output, s.Bytes = "", []byte(rec.Output)
	}
	return json.Marshal(s)
}

// decode returns a claim answered by a record as Redis keeps it, and its
// doubt.
func decode(record, doubt any) (tool.Claim, error) {
	b, _ := record.(string)
	var s stored
	if err := json.Unmarshal([]byte(b), &s); err != nil {
		return tool.Claim{}, fmt.Errorf("reboundredis: a call's record is not a tool.Record: %w", err)
	}
	if s.Bytes != nil {
		s.Output = string(s.Bytes)
	}
	return tool.Claim{Record: &s.Record, PriorRunUnknown: doubt == "1"}, nil
}

// stillHeld turns a script's 0 or 1 into whether the claim was still
// held.
func stillHeld(res any, err error) error {
	if err != nil {
		return err
	}
	if res != int64(1) {
		return errNotHeld
	}
	return nil
}

// ms returns d in whole milliseconds, at least 1.
func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// at returns reply[i], or nil if the reply is shorter.
func at(reply []any, i int) any {
	if i < len(reply) {
		return reply[i]
	}
	return nil
}
