package reboundredis

import (
	"context"
	"encoding/binary"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/internal/header"
	"github.com/rebound-go/rebound/internal/pace"
	"github.com/rebound-go/rebound/ratelimit"
)

// arrivalMargin is how much later than its slot, relative to the other
// calls of a window, a call may reach the provider without that window
// holding more than the limit there (see Limiter): a call late by d can
// join a 60 s window at the provider whose slots spanned 60 s + d.
const arrivalMargin = 500 * time.Millisecond

// Limiter paces the calls of every replica to one target (a provider
// organisation's key, a model) to requests- and tokens-per-minute limits
// kept on Redis, and shares what any replica learns from the provider's
// rate-limit headers. It has the shapes of ratelimit.Limiter (Allow, Wait,
// Correct, Learn) and is a ratelimit.Pacer, so ratelimit.Transport takes
// it as it takes the in-memory one.
//
// Each decision is one round trip: a Lua script runs GCRA (the generic
// cell rate algorithm: a token bucket kept as one time per limit) for
// both limits at once on the Redis server's clock, so the replicas'
// clocks may disagree. The guarantee is ratelimit.Limiter's: no 60 s
// window sees more than a limit, with bursts of a second's worth of
// requests and of Config.TokenBurst tokens and a pace that leaves room
// for them. It is kept with a margin: the pace is computed for windows of
// 60.5 s, not 60, because the provider counts calls when they arrive, and
// between a call's slot and its arrival lie the reply's way back from
// Redis, a sleep's wake-up, the scheduler and the network, which do not
// delay every call alike. A call late by up to half a second more than
// another cannot push a 60 s window at the provider over the limit; the
// margin costs 0.8% of the limit.
//
// While Redis is away, a ratelimit.Limiter of the same Config decides in
// this process alone, so the fleet may then send up to its number of
// replicas times the limit, until the provider's headers (learned
// locally too) or its 429s slow it.
//
// It is safe for concurrent use.
type Limiter struct {
	store *Store
	keys  []string           // the target's key
	local *ratelimit.Limiter // decides while Redis is away
	clock rebound.Clock      // nil: Wait sleeps by its context's clock
	// requests and tokens are the configured paces; paces is them as the
	// script takes them, made once.
	requests, tokens pace.Pace
	paces            any
	// learned is set while the last answer said a pace learned from
	// headers was in force: only then is a header that gives the
	// configured pace back worth a round trip.
	learned atomic.Bool
	// announced is what this replica's answers' headers said of the
	// quotas, less what it sent since, for Headroom.
	announced pace.Announced
}

// NewLimiter returns a Limiter of cfg's limits for target, kept on s.
// Every Limiter of a target, in every replica, must have the same limits;
// cfg.Clock is only what Wait sleeps by and the local Limiter's time, as
// the pace goes by the Redis server's clock.
func NewLimiter(s *Store, target string, cfg ratelimit.Config) *Limiter {
	w := time.Minute + arrivalMargin
	l := &Limiter{
		store:    s,
		keys:     []string{s.key("limit", target)},
		local:    ratelimit.New(cfg),
		clock:    cfg.Clock,
		requests: pace.Requests(cfg.RequestsPerMinute, w),
		tokens:   pace.Tokens(cfg.TokensPerMinute, cfg.TokenBurst, w),
	}
	var packed []byte
	for _, p := range [...]pace.Pace{l.requests, l.tokens} {
		packed = binary.LittleEndian.AppendUint64(packed, math.Float64bits(interval(p)))
		packed = binary.LittleEndian.AppendUint64(packed, math.Float64bits(float64(p.Burst)))
	}
	l.paces = string(packed)
	return l
}

// interval is p's time between two units in microseconds; 0 for no limit.
func interval(p pace.Pace) float64 {
	if p.Rate == 0 {
		return 0
	}
	return 1e6 / p.Rate
}

// Allow reports whether one call of tokens may go now, and if so counts
// it.
func (l *Limiter) Allow(tokens int) bool {
	ok, _, err := l.decide(context.Background(), "allow", tokens, -1)
	if err != nil {
		ok = l.local.Allow(tokens)
	}
	if ok {
		l.announced.Sent(tokens, time.Now())
	}
	return ok
}

// Wait waits until one call of tokens may go, or returns
// ratelimit.ErrDeadline at once, having reserved nothing, if that would
// be after ctx's deadline, or ctx's error if it ends first. The slot is
// reserved before the wait: a call whose context ends while it waits
// does not give it back, since other replicas may have reserved after it.
func (l *Limiter) Wait(ctx context.Context, tokens int) error {
	var most time.Duration = -1
	if deadline, ok := ctx.Deadline(); ok {
		most = max(time.Until(deadline), 0)
	}
	ok, delay, err := l.decide(ctx, "wait", tokens, most)
	if err != nil {
		err = l.local.Wait(ctx, tokens)
		ok = err == nil
	}
	if ok {
		l.announced.Sent(tokens, time.Now())
	}
	switch {
	case err != nil:
		return err
	case !ok:
		return ratelimit.ErrDeadline
	case delay == 0:
		return nil
	}
	clock := l.clock
	if clock == nil {
		clock = callctx.ClockOf(ctx)
	}
	return clock.Sleep(ctx, delay)
}

// Correct charges the difference between a call's estimated and actual
// tokens, once its usage is known, as ratelimit.Limiter.Correct does:
// tokens over the estimate (up to a burst) delay the calls after it, in
// every replica; tokens under it are not given back.
func (l *Limiter) Correct(estimated, actual int) {
	if actual <= estimated {
		return
	}
	if _, _, err := l.decide(context.Background(), "charge", actual-estimated, -1); err != nil {
		l.local.Correct(estimated, actual)
	}
}

// Learn reads a response's rate-limit headers, as ratelimit.Limiter.Learn
// does, for every replica: when the provider says little is left of a
// quota, the shared pace slows so that it lasts until the reset; with
// nothing left, no replica's call goes before the reset. A response that
// leaves the pace as it is costs no round trip.
func (l *Limiter) Learn(h http.Header) {
	l.local.Learn(h)
	now := time.Now()
	rl, ok := header.RateLimits(h, now)
	if !ok {
		return
	}
	l.announced.Learn(rl, now)
	args := make([]any, 0, 8)
	news := false
	for _, q := range [...]struct {
		quota      header.Quota
		configured pace.Pace
	}{{rl.Requests, l.requests}, {rl.Tokens, l.tokens}} {
		p, ok := pace.Learned(q.quota, q.configured)
		var (
			learned, burst float64
			lasts, block   int64
		)
		switch {
		case !ok:
		case p.Rate == 0:
			block = q.quota.Reset.Microseconds()
		case p == q.configured:
			// Plenty left: a slower pace learned before ends, if there is
			// one.
			lasts = q.quota.Reset.Microseconds()
		default:
			learned, burst, lasts = interval(p), float64(p.Burst), q.quota.Reset.Microseconds()
		}
		news = news || block > 0 || learned > 0 || lasts > 0 && l.learned.Load()
		args = append(args, learned, burst, lasts, block)
	}
	if news {
		// Without Redis, the local Limiter has learned it: enough.
		l.decide(context.Background(), "learn", 0, -1, args...)
	}
}

// Headroom returns what this replica knows of what is left of the
// provider's quotas, as ratelimit.Limiter.Headroom does: the latest
// headers this replica read, less what it sent since. The other
// replicas' calls show in the next headers it reads.
func (l *Limiter) Headroom() ratelimit.Headroom {
	r, t, known := l.announced.Headroom(time.Now())
	return ratelimit.Headroom{Requests: r, Tokens: t, Known: known}
}

// anyDelay is the script's "a wait takes any delay", boxed once.
var anyDelay any = "-1"

// decide runs the script once: mode is wait, allow, charge or learn;
// most is the longest delay a wait takes (negative: any). It reports
// whether the call may go, after how long, or an error if Redis did not
// decide.
func (l *Limiter) decide(ctx context.Context, mode string, tokens int, most time.Duration, learn ...any) (bool, time.Duration, error) {
	args := make([]any, 4, 4+len(learn))
	args[0], args[1], args[2], args[3] = mode, tokens, anyDelay, l.paces
	if most >= 0 {
		args[2] = most.Microseconds()
	}
	args = append(args, learn...)
	res, err := l.store.run(ctx, limitScript, l.keys, args...)
	if err != nil {
		return false, 0, err // Redis away: this process decides
	}
	v, isInt := res.(int64)
	if !isInt || v < 0 {
		return false, 0, l.store.unreadable(res)
	}
	l.learned.Store(v&2 != 0)
	return v&1 != 0, time.Duration(v>>2) * time.Microsecond, nil
}

// limitScript makes one decision for a target, atomically, on the
// server's clock. The target's key (KEYS[1]) holds doubles, packed: the
// last time the script ran, when the key expires, and GCRA's theoretical
// arrival time of the requests and of the tokens; then, while a block or a
// pace learned from headers is in force, for each limit the time before
// which no call may go and the learned pace's interval, burst and end.
// Times are microseconds of the server's clock. A string read and written
// whole, short in the usual case, and whose expiry is moved only once a
// minute, costs Redis little more than redis_rate's one number.
//
// ARGV: the mode (wait, allow, charge, learn); the call's tokens; the
// longest delay a wait takes (µs; negative: any); the configured paces,
// four doubles packed: the requests' interval (µs; 0: no limit) and
// burst, and the tokens' ones; for learn, for each limit: a learned
// interval (µs; 0: none) and burst, how long it lasts (with no interval:
// the configured pace is back), and how long no call may go (0: no
// block).
//
// A call reserves the earliest time both limits allow and is charged to
// each as if it arrived then, so that the time it goes is in both
// limits' counts: no window of w holds more than a burst plus w's worth
// of the pace in either. It returns one integer, cheaper to send and read
// than an array: the delay in µs times 4, plus 2 if a learned pace is in
// force, plus 1 if the call may go.
var limitScript = redis.NewScript(`
local max, ceil, tonumber = math.max, math.ceil, tonumber
local key, mode = KEYS[1], ARGV[1]
local clock = redis.call('TIME')
local now = clock[1] * 1000000 + clock[2]
local seen, expires, rtat, ttat, rblock, ri, rk, rend, tblock, ti, tk, tend = now, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
local kept = redis.call('GET', key)
if kept then
	if #kept == 32 then
		seen, expires, rtat, ttat = struct.unpack('<dddd', kept)
	elseif #kept == 96 then
		seen, expires, rtat, ttat, rblock, ri, rk, rend, tblock, ti, tk, tend = struct.unpack('<dddddddddddd', kept)
	end
end
-- A server clock set back takes every time kept back with it, so that no
-- call waits for the clock to catch up. (The key's expiry is a time of
-- the same clock, as Redis keeps it: it stays.)
if now < seen then
	local shift = now - seen
	rtat, rblock, rend = rtat + shift, rblock + shift, rend + shift
	ttat, tblock, tend = ttat + shift, tblock + shift, tend + shift
end

local delay, learned = 0, 0
if mode == 'learn' then
	local o = 5
	local function learn(i, k, e, block)
		local li, lk, lasts, wait = tonumber(ARGV[o]), tonumber(ARGV[o + 1]), tonumber(ARGV[o + 2]), tonumber(ARGV[o + 3])
		o = o + 4
		if li > 0 then
			i, k, e = li, lk, max(e, now + lasts)
		elseif lasts > 0 then
			e = 0
		end
		if wait > 0 then block = max(block, now + wait) end
		return i, k, e, block
	end
	ri, rk, rend, rblock = learn(ri, rk, rend, rblock)
	ti, tk, tend, tblock = learn(ti, tk, tend, tblock)
	if rend > now or tend > now then learned = 1 end
else
	-- The pace in force: a learned one until its end, else the
	-- configured one (a learned pace that has ended is forgotten). The
	-- rest is written with comparisons rather than math.max: this is the
	-- path of every call, and a function call costs Lua more.
	local tcost = tonumber(ARGV[2])
	local cri, crk, cti, ctk = struct.unpack('<dddd', ARGV[4])
	if rend > now then learned = 1 else ri, rk = cri, crk end
	if tend > now then learned = 1 else ti, tk = cti, ctk end
	if tcost > tk then tcost = tk end
	local rcost, at = 1, now
	if mode == 'charge' then
		rcost = 0
	else
		if rblock > at then at = rblock end
		if tblock > at then at = tblock end
		if ri > 0 then
			local t = rtat + (1 - rk) * ri
			if t > at then at = t end
		end
		if ti > 0 and tcost > 0 then
			local t = ttat + (tcost - tk) * ti
			if t > at then at = t end
		end
	end
	delay = ceil(at - now)
	if delay > 0 then
		local most = tonumber(ARGV[3])
		if mode == 'allow' or most >= 0 and delay >= most then return delay * 4 + learned * 2 end
	end
	if ri > 0 and rcost > 0 then
		if at > rtat then rtat = at end
		rtat = rtat + ri
	end
	if ti > 0 and tcost > 0 then
		if at > ttat then ttat = at end
		ttat = ttat + tcost * ti
	end
end

-- The key must live until every time it keeps has passed (then it says
-- nothing a missing one does not); its expiry is moved a minute beyond
-- that when it falls short, not at every call.
local long = rblock > now or rend > now or tblock > now or tend > now
local last = now
if rtat > last then last = rtat end
if ttat > last then last = ttat end
if long then last = max(last, rblock, rend, tblock, tend) end
local px = 0
if last + 1000000 > expires then
	expires = last + 61000000
	px = ceil((expires - now) / 1000)
end
local packed
if long then
	packed = struct.pack('<dddddddddddd', now, expires, rtat, ttat, rblock, ri, rk, rend, tblock, ti, tk, tend)
else
	packed = struct.pack('<dddd', now, expires, rtat, ttat)
end
if px > 0 then
	redis.call('SET', key, packed, 'PX', px)
else
	redis.call('SET', key, packed, 'KEEPTTL')
end
return delay * 4 + learned * 2 + 1
`)
