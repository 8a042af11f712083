package reboundredis

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// capAnswer is the script's answer.
type capAnswer struct {
	ok                        bool
	spent, held, others, mine int64
}

// decide runs the script for st: mode reserve (need, under hold) or
// settle (items only), with the settles and the batch Redis has yet to
// hear. One call at a time may move the share.
func (c *Cap) decide(ctx context.Context, st *capState, mode string, need int64, hold string, items []capItem) (capAnswer, error) {
	// While Redis is known away the call is most likely not sent: a
	// share lowered for it would be lost.
	updater := !c.store.down.Load() && st.updating.CompareAndSwap(false, true)
	if updater {
		defer st.updating.Store(false)
	}
	sent := time.Now()
	keep := int64(-1) // the share stays as it is
	st.mu.Lock()
	if updater {
		// Lower the share first, to what the last answer says is fair
		// less what this call asks, but not below what is spent or held
		// here: Redis may lower its figure only as far as this.
		fair := (c.limit - st.spent - st.held - st.others - need) / c.replicas
		keep = max(min(st.share-need, fair), st.localHeld+st.unsent+st.batch.micros, 0)
		if time.Now().After(st.shareUntil) {
			keep = max(st.localHeld+st.unsent+st.batch.micros, 0)
		}
		st.share = min(st.share, keep)
	}
	if st.batch.member == "" && st.unsent > 0 {
		st.batch, st.unsent = capItem{"f:" + randomID(), st.unsent}, 0
	}
	batch := st.batch
	args := []any{mode, c.limit, need, hold, c.lease.Milliseconds(), st.expiry.Milliseconds(), c.replicas, c.id, keep}
	for _, it := range slices.Concat(items, st.settles, []capItem{batch}) {
		if it.member != "" {
			args = append(args, it.member, it.micros)
		}
	}
	st.mu.Unlock()

	res, err := c.store.run(ctx, capScript, st.keys, args...)
	r, ok := ints(res, 5)
	if err == nil && (!ok || len(r) != 5) {
		err = c.store.unreadable(res)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if err != nil {
		st.settles = append(st.settles, items...)
		return capAnswer{}, err
	}
	// Redis has heard every settle sent, and the batch. Other calls may
	// have changed the list meanwhile: what was sent is found by member.
	st.settles = slices.DeleteFunc(st.settles, func(it capItem) bool { return slices.Contains(args[9:], any(it.member)) })
	if batch.member != "" && st.batch.member == batch.member {
		st.batch = capItem{}
	}
	a := capAnswer{ok: r[0] == 1, spent: r[1], held: r[2], others: r[3], mine: r[4]}
	st.spent, st.held, st.others = a.spent, a.held, a.others
	if updater {
		st.share, st.shareUntil = a.mine, sent.Add(c.lease)
	}
	a.held += a.others
	return a, nil
}

// capSpentScript reads a period's settled spend (KEYS[1], the period's
// hash), adding the amounts of the members in ARGV (pairs of a member
// and its amount) that Redis has not counted yet.
var capSpentScript = redis.NewScript(`
local spent = tonumber(redis.call('HGET', KEYS[1], 'spent')) or 0
for i = 1, #ARGV, 2 do
	if tonumber(redis.call('HGET', KEYS[1], ARGV[i])) ~= -1 then
		spent = spent + tonumber(ARGV[i + 1])
	end
end
return spent
`)

// capScript is one decision on a period's cap, atomic, on the server's
// clock. KEYS: the period's hash (spent, held, shares, and a field per
// hold, share and settled member) and its leases (a sorted set of those
// members by when their lease ends, in ms). Amounts are micro-dollars.
//
// ARGV: the mode (reserve, settle); the cap; what the reservation asks;
// its hold's member; the lease (ms); the keys' expiry (ms); the replicas;
// this replica's id; the share it keeps (-1: this call leaves its share
// alone); then pairs of a member settled and its amount.
//
// Leases that ended are swept first: their holds and shares stop
// counting. A settled member is marked -1 for a lease, so that a settle
// or a batch sent again counts once. A reservation is granted only if
// spent + held + the other shares + this replica's share + it stays
// within the cap; a call that moves the share gives it max(what the
// replica keeps, what is left / replicas). It returns whether the
// reservation was granted, spent, held, the other shares and this
// replica's.
var capScript = redis.NewScript(`
local h, z = KEYS[1], KEYS[2]
local mode, cap, need, hold = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local lease, ttl, n, me, keep = tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]), 's:' .. ARGV[8], tonumber(ARGV[9])
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
for _, m in ipairs(redis.call('ZRANGEBYSCORE', z, '-inf', now, 'LIMIT', 0, 256)) do
	local v = tonumber(redis.call('HGET', h, m))
	if v and v > 0 then
		redis.call('HINCRBY', h, string.sub(m, 1, 1) == 's' and 'shares' or 'held', -v)
	end
	redis.call('HDEL', h, m)
	redis.call('ZREM', z, m)
end
for i = 10, #ARGV, 2 do
	local m, usd = ARGV[i], tonumber(ARGV[i + 1])
	local v = tonumber(redis.call('HGET', h, m))
	if v == nil or v >= 0 then
		if v and v > 0 then redis.call('HINCRBY', h, 'held', -v) end
		redis.call('HINCRBY', h, 'spent', usd)
		redis.call('HSET', h, m, -1)
		redis.call('ZADD', z, now + lease, m)
	end
end
local f = redis.call('HMGET', h, 'spent', 'held', 'shares', me)
local spent, held, shares, mine = tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3]) or 0, tonumber(f[4]) or 0
local others = shares - mine
local share = mine
if keep >= 0 then share = keep end
local ok = 1
if mode == 'reserve' then
	local total = spent + held + others + share + need
	if total > cap or need <= 0 and total >= cap then
		ok = 0
	else
		redis.call('HSET', h, hold, need)
		redis.call('HINCRBY', h, 'held', need)
		redis.call('ZADD', z, now + lease, hold)
		held = held + need
	end
end
if keep >= 0 then
	local fair = math.floor((cap - spent - held - others) / n)
	if fair > share then share = fair end
	redis.call('HSET', h, me, share)
	redis.call('HINCRBY', h, 'shares', share - mine)
	redis.call('ZADD', z, now + lease, me)
	mine = share
end
redis.call('PEXPIRE', h, ttl)
redis.call('PEXPIRE', z, ttl)
return {ok, spent, held, others, mine}
`)
