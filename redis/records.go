package reboundredis

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/tool"
)

// RecordsConfig says how long Records keep what they record.
type RecordsConfig struct {
	// TTL is how long a call's record is kept, and a key whose holder
	// died stays marked so. Zero means tool.DefaultRecordTTL (24 h).
	TTL time.Duration
}

// Records are tool.Records shared by the replicas of a service: set as a
// tool.Registry's Records, a call with side effects made on one replica is
// answered from its record on every other, and a call running on one is
// waited for by the others instead of being made twice.
//
// A key is a Redis hash under the Store's prefix: its record (the
// tool.Record as JSON) for TTL, or, while its call runs, the holder's token
// and the end of its lease by the Redis server's clock. A claim, a renewal,
// a record and a release are one script each, one round trip bounded by
// the Store's Timeout. A claim that finds a lease run out takes the key
// and says that the earlier run's outcome is unknown; the mark stays with
// the key until a record replaces it.
//
// While Redis is away, claims are decided by records in this process's
// memory (tool.MemoryRecords), which keep this replica from repeating its
// own calls but know nothing of the others': a call made again on another
// replica during an outage may be made twice. Records made during an
// outage stay on this replica and still answer its repeats once Redis is
// back. A run claimed on Redis whose record cannot be written because
// Redis went away meanwhile is recorded on this replica only; on Redis its
// lease runs out, and the call's next claimant there is told that its
// outcome is unknown. Redis 5 or later is needed.
//
// Records are safe for concurrent use.
type Records struct {
	store *Store
	ttl   time.Duration
	local tool.MemoryRecords
}

// NewRecords returns Records on s.
func NewRecords(s *Store, cfg RecordsConfig) (*Records, error) {
	if s == nil {
		return nil, errors.New("reboundredis: NewRecords: the Store is nil")
	}
	if cfg.TTL < 0 {
		return nil, fmt.Errorf("reboundredis: negative RecordsConfig.TTL (%v)", cfg.TTL)
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = tool.DefaultRecordTTL
	}
	return &Records{store: s, ttl: ttl, local: tool.MemoryRecords{TTL: ttl}}, nil
}

// A token says where its claim was taken: on Redis, or on this replica
// while Redis was away.
const (
	sharedToken = "r"
	localToken  = "l"
)

// nowMS sets now to the Redis server's time in milliseconds, so that every
// replica's lease is timed by one clock.
const nowMS = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// claimScript: KEYS[1] the call's key; ARGV token, lease ms, TTL ms.
// Returns {'done', record}, {'held'} or {'claimed', doubt}.
var claimScript = redis.NewScript(nowMS + `
local f = redis.call('HMGET', KEYS[1], 'rec', 'tok', 'until', 'doubt')
if f[1] then return {'done', f[1]} end
local doubt = f[4] or '0'
if f[2] then
	if tonumber(f[3]) > now then return {'held'} end
	doubt = '1'
end
redis.call('HSET', KEYS[1], 'tok', ARGV[1], 'until', now + tonumber(ARGV[2]), 'doubt', doubt)
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[2]), tonumber(ARGV[3])))
return {'claimed', doubt}
`)

// extendScript: KEYS[1]; ARGV token, lease ms, TTL ms. Returns 1 if the
// token holds the key.
var extendScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
` + nowMS + `
redis.call('HSET', KEYS[1], 'until', now + tonumber(ARGV[2]))
redis.call('PEXPIRE', KEYS[1], math.max(tonumber(ARGV[2]), tonumber(ARGV[3])))
return 1
`)

// completeScript: KEYS[1]; ARGV token, record, TTL ms. Returns 1 if the
// token held the key.
var completeScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'tok') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'rec', ARGV[2])
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
	token := sharedToken + rand.Text()
	res, err := r.store.run(ctx, claimScript, []string{r.store.key("call", key)}, token, ms(lease), ms(r.ttl))
	if errors.Is(err, ErrUnavailable) {
		lc.Token = localToken + lc.Token
		return lc, nil
	}
	r.local.Release(ctx, key, lc.Token)
	if err != nil {
		return tool.Claim{}, fmt.Errorf("reboundredis: claiming a call's key: %w", err)
	}
	reply, _ := res.([]any)
	state, _ := at(reply, 0).(string)
	switch state {
	case "done":
		var rec tool.Record
		s, _ := at(reply, 1).(string)
		if err := json.Unmarshal([]byte(s), &rec); err != nil {
			return tool.Claim{}, fmt.Errorf("reboundredis: a call's record is not a tool.Record: %w", err)
		}
		return tool.Claim{Record: &rec}, nil
	case "held":
		return tool.Claim{}, nil
	case "claimed":
		return tool.Claim{Token: token, PriorRunUnknown: at(reply, 1) == "1" || lc.PriorRunUnknown}, nil
	}
	return tool.Claim{}, fmt.Errorf("reboundredis: unexpected reply to a claim: %v", res)
}

// Extend renews the caller's claim on key for lease from now.
func (r *Records) Extend(ctx context.Context, key, token string, lease time.Duration) error {
	if t, ok := strings.CutPrefix(token, localToken); ok {
		return r.local.Extend(ctx, key, t, lease)
	}
	return stillHeld(r.store.run(ctx, extendScript, []string{r.store.key("call", key)}, token, ms(lease), ms(r.ttl)))
}

// Complete records rec as the outcome of the caller's run of key. If Redis
// is away, rec is kept on this replica only, and an error says so.
func (r *Records) Complete(ctx context.Context, key, token string, rec tool.Record) error {
	if t, ok := strings.CutPrefix(token, localToken); ok {
		return r.local.Complete(ctx, key, t, rec)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("reboundredis: %w", err)
	}
	err = stillHeld(r.store.run(ctx, completeScript, []string{r.store.key("call", key)}, token, b, ms(r.ttl)))
	if errors.Is(err, ErrUnavailable) {
		if c, _ := r.local.Claim(ctx, key, r.ttl); c.Token != "" {
			r.local.Complete(ctx, key, c.Token, rec)
		}
		return fmt.Errorf("reboundredis: the record is kept on this replica only: %w", err)
	}
	return err
}

// Release gives key up without a record.
func (r *Records) Release(ctx context.Context, key, token string) error {
	if t, ok := strings.CutPrefix(token, localToken); ok {
		return r.local.Release(ctx, key, t)
	}
	return stillHeld(r.store.run(ctx, releaseScript, []string{r.store.key("call", key)}, token))
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
