// Package fallback moves a request along an ordered list of targets (a
// model, a cheaper model, a cached answer) until one answers.
//
// Each Target has its own retry policy, and usually its own breaker. A
// Chain tries them in order and moves to the next when:
//
//   - the target's breaker is open (no request is sent);
//   - the target's own limit on requests in flight had no room in time
//     (ratelimit.ErrNoSlot, ErrQueueFull: nothing was sent), or its rate
//     limits had no room in time (ratelimit.ErrOverPace);
//   - the target is overloaded (at once, without spending retries on it,
//     unless the target says RetryOverloaded);
//   - the target's quota is exhausted: it is then skipped for
//     QuotaCooldown, since quota does not come back in seconds (by this
//     chain alone, or, with Chain.Cooldowns shared, by every replica's);
//   - its retries are spent;
//   - it is rate-limited and another target of its Pool (another key of
//     the same provider, say) is still to be tried: at once, the pool's
//     targets tried by their headroom, or, for a request of a
//     conversation (Chain.Conversation), first the one that holds the
//     provider's prompt cache of it while it can take the request.
//
// A context overflow first calls the Compact hook, which returns a smaller
// request, and tries the same target once more; if that overflows too, the
// chain moves on to a target whose ContextWindow is larger. A permanent
// error stops the chain: a 400 on one model is a 400 on all. So does the
// caller's cancellation, and so does a call with side effects once a
// target may have carried it out: the call's context is marked
// rebound.WithSideEffects and an attempt was made, or a target stopped
// for its side effects (rebound.StopSideEffects), as a rebound.Transport
// does for a request its SideEffects judges to have them.
//
// A target makes its attempts through its Call, each under its Policy;
// or, with Run, makes them all itself (a rebound.Transport's RoundTrip, a
// proxy's upstream): the chain hands it the Policy to run under and hears
// its attempts through the Policy's Observer.
//
// The Result says which target answered and carries the trail: every
// target tried or skipped, every attempt, every verdict, and the tokens
// each attempt reported (cost.Report), from which package cost counts
// spend and waste.
//
// The last step of a chain may be an answer given before: Chain.Stale,
// asked once every target has failed for a failure of the providers, may
// serve an answer it kept in place of the error, and the Result says so
// (Result.Stale). For HTTP, package cache keeps the answers: a cache.Cache
// around the whole chain (its Exchange given the chain's call as next), as
// rebound proxy runs a route, or in a rebound.Transport for one target.
// Not in the Transport of each target of a chain: the first target's old
// answer would stand in for the fresh one the next target could give.
package fallback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/ratelimit"
)

// DefaultQuotaCooldown is how long a target whose quota ran out is skipped
// unless the Chain says otherwise.
const DefaultQuotaCooldown = 10 * time.Minute

// ErrNoTarget is the error of a chain that skipped every target without
// making a single attempt.
var ErrNoTarget = errors.New("fallback: no target could be tried")

// Target is one way to answer a request.
type Target[Req, Resp any] struct {
	// Name identifies the target in results, trails and price tables,
	// e.g. "gpt-x" or "cache".
	Name string
	// Call answers a request, in one attempt. It may report the tokens it
	// used with cost.Report.
	Call func(ctx context.Context, req Req) (Resp, error)
	// Run, if set, is called in Call's place, once, for a target that
	// makes its own attempts (each request through a rebound.Transport,
	// say): p is Policy as the chain runs it (see RetryOverloaded), and
	// Run makes every attempt under p, telling p.Observer of them, as
	// Transport does; ctx names the call's target (rebound.TargetFrom),
	// which a Run may key its breaker by. It returns the answer, or an
	// error saying why there is none (a *rebound.GiveUpError, usually). A
	// value returned while p.Observer heard a give-up is a failure all
	// the same: Transport hands back the last failed response, body
	// whole, and tells the Observer why it stopped. A value returned
	// with a failure is the Result's Value if no target answers after
	// it, else Chain.Discard's. The trail holds the attempts the events
	// told of, as they ended.
	Run func(ctx context.Context, req Req, p rebound.Policy) (Resp, error)
	// Policy is the retry policy on this target, its Breaker included.
	Policy rebound.Policy
	// Key, if set, names req's call on this target: the target of its
	// events (rebound.WithTarget) and the key its quota cool-down is kept
	// under, so that one model of a provider found out of quota leaves
	// its others be. Nil means Name.
	Key func(req Req) string
	// ContextWindow is the target's context window in tokens, or zero if
	// unknown. After a context overflow the chain moves only to a target
	// with a larger window.
	ContextWindow int
	// RetryOverloaded retries an overloaded target under its Policy
	// instead of moving on at once.
	RetryOverloaded bool
	// Pool, if set, names a pool of interchangeable targets with limits
	// of their own (the keys of one provider account, say). The chain
	// tries the targets of a pool, in the places they hold in Targets, in
	// order of their Headroom, most first, those cooling down last (or,
	// for a request of a conversation, as Chain.Conversation says); and a
	// rate-limited answer on one moves on at once to the next of its
	// pool that is not cooling down, without waiting for the server's
	// hint, since another key's limits are likelier to have room than
	// this one's after the wait. The last of a pool tried is retried
	// under its Policy as usual. When the chain ends with a pool and
	// LastResort is set, the last resort is its last member not cooling
	// down. Empty (the default) means the target is in no pool.
	Pool string
	// Headroom, for a target in a Pool, says how much of its limits it
	// has left, from 0 to 1 (ratelimit.Headroom.Least, say); it is asked
	// once a call. Nil means 1. Members of equal headroom (those that
	// know nothing of their limits, say) take turns at going first.
	Headroom func() float64
	// Affinity, for a target in a Pool, is its name to the pool's
	// conversation affinity (see Chain.Conversation): the same on every
	// replica that has the target and another for each member, such as a
	// hash of the key it holds (never the key itself: keep it as secret
	// as a log line), and not its place in Targets, which another
	// replica may order otherwise. A pool keeps conversations on their
	// members only when every member has one; empty (the default) in
	// any member means the pool goes by Headroom alone.
	Affinity string
	// Ready, for a target in a Pool that keeps conversations, reports
	// whether it can take req now without waiting: its breaker lets
	// calls through, a slot of its limit on requests in flight is free,
	// its pace holds nothing back. It is asked once a call. Nil means
	// ready.
	Ready func(req Req) bool
	// Estimate, for spend caps (cost.WithCaps), says what one attempt of
	// req on this target may use, priced under Name: each attempt
	// reserves it before it is made, and a target whose attempt would
	// pass a cap is skipped for the next. Leave it nil for a Call whose
	// requests go through rebound.Transport, which reserves for each
	// request itself.
	Estimate func(req Req) cost.Usage
}

// Chain is an ordered list of targets. It is safe for concurrent use once
// set up; its fields must not change while it is in use.
type Chain[Req, Resp any] struct {
	Targets []Target[Req, Resp]
	// Compact, if set, is called on a context overflow with the request
	// that overflowed and the error; the smaller request it returns is
	// tried once more on the same target, and then on the targets after
	// it.
	Compact func(ctx context.Context, req Req, err error) (Req, error)
	// QuotaCooldown is how long a target whose quota ran out is skipped.
	// Zero means DefaultQuotaCooldown.
	QuotaCooldown time.Duration
	// Hedge, if set, hedges each target with the next: when the target
	// being tried has not answered after the hedge's delay (learnt from
	// that target's answers, see rebound.Hedge), the target that would be
	// tried after it starts beside it; the first answer wins and the
	// other is cancelled. The hedge draws from its target's retry budget,
	// if it has one. A target that ran as a hedge is not tried again; a
	// call with side effects is never hedged. Nil means no hedging
	// between targets (a target's Policy.Hedge still hedges within it).
	Hedge *rebound.Hedge
	// Cooldowns remembers which targets are cooling down. Nil means the
	// chain's own memory; one shared between replicas (package
	// reboundredis has one) lets a target found out of quota by one be
	// skipped by all.
	Cooldowns Cooldowns
	// LastResort has the last target tried, and heard out, whatever came
	// before: it is not skipped while it cools down nor made to cool
	// down, and an overloaded answer is retried under its Policy, since
	// there is nowhere left to move on to. Its own answer (the
	// provider's 429, say) then tells the caller more than ErrNoTarget.
	// False means the last target follows the rules of the others.
	LastResort bool
	// Conversation, if set, names the conversation req belongs to, for
	// the pools whose members have an Affinity; "" means none. A
	// provider keeps its prompt cache per key or account, so a pool
	// keeps the requests of one conversation on one member while it can:
	// the members are ranked for each conversation by rendezvous hashing
	// (the weight of a member is a hash of the conversation's name and
	// the member's Affinity), and a request goes to the first of them
	// that is not cooling down, is Ready, and has at least half the
	// Headroom of the best member that is both; the members that are not
	// come after, by headroom, those cooling down last. So replicas with
	// no state shared send a conversation to the same member, different
	// conversations spread over the members, and a conversation leaves
	// its member only while it runs low, cools down or cannot take the
	// request at once, and comes back when it can. A request of no
	// conversation goes by Headroom alone. Nil means none.
	Conversation func(req Req) string
	// Discard, if set, is given each value a Run returned with its
	// failure that the Result does not carry (the zero value included),
	// to let go of it: an HTTP response's body to close, say.
	Discard func(Resp)
	// Stale, if set, is the chain's last step: asked once when every
	// target has failed for a failure of the providers (they were
	// down, overloaded, rate-limited past their retries, out of quota,
	// open, without a slot: not a permanent error, a context overflow,
	// a spend cap's refusal, the caller's cancellation, nor a call with
	// side effects), with the chain's error; a value it returns with
	// true (an answer kept from an earlier call, say) is the Result's,
	// marked Stale, in place of the error: the call then returns no
	// error, so it must return true only with a value the caller can
	// use (never a nil response). Nil means none.
	Stale func(ctx context.Context, req Req, err error) (Resp, bool)

	own  MemoryCooldowns // the cool-downs when Cooldowns is nil
	turn atomic.Uint64   // counts pooled calls, so that equal members take turns
}

// Do sends req along the chain and returns the first answer, with the
// trail of how it got there. Without an answer the error is a *ChainError.
func (c *Chain[Req, Resp]) Do(ctx context.Context, req Req) (Result[Resp], error) {
	d := &chainCall[Req, Resp]{c: c, ctx: ctx, task: callctx.Target(ctx), clock: callctx.ClockOf(ctx),
		sideEffects: callctx.SideEffects(ctx), last: ErrNoTarget}
	d.trail.steps = d.trail.first[:0]
	if c.Hedge != nil {
		d.tried = make([]bool, len(c.Targets))
	}
	d.arrange(req)
	for pos := range c.Targets {
		i := d.at(pos)
		if d.tried != nil && d.tried[i] {
			continue // it ran as a hedge
		}
		t := &c.Targets[i]
		key := d.key(i, req)
		if skip := d.skip(i, key); skip != "" {
			d.trail.steps = append(d.trail.steps, Step{Target: t.Name, Skipped: skip})
			continue
		}
		if d.attempted && d.sideEffects {
			// Another target would do the side effect a second time.
			return d.failed(d.last)
		}
		compacted := false
		for {
			j := d.hedgeTarget(pos, req)
			v, answered, errs := d.race(i, j, key, req)
			if answered >= 0 {
				for k, err := range errs { // a loser out of quota still cools down
					if err != nil {
						target := []int{i, j}[k]
						d.judge(target, d.key(target, req), err, false)
					}
				}
				d.trail.steps[answered].Answered = true
				d.letGo()
				return Result[Resp]{Value: v, Target: d.trail.steps[answered].Target, Trail: d.trail.steps}, nil
			}
			stop, again := d.judge(i, key, errs[0], c.Compact != nil && !compacted)
			if stop != nil {
				return d.failed(stop)
			}
			if j >= 0 {
				if stop, _ := d.judge(j, d.key(j, req), errs[1], false); stop != nil {
					return d.failed(stop)
				}
			}
			if again {
				smaller, cerr := c.Compact(ctx, req, errs[0])
				if cerr != nil {
					return d.failed(fmt.Errorf("fallback: compacting the request: %w", cerr))
				}
				req, compacted = smaller, true
				key = d.key(i, req)
				continue
			}
			break
		}
	}
	return d.stale(req, d.last)
}

// chainCall is the state of one Chain.Do.
type chainCall[Req, Resp any] struct {
	c           *Chain[Req, Resp]
	ctx         context.Context
	task        string // the caller's target, if any
	clock       rebound.Clock
	sideEffects bool
	trail       trail
	log         attemptLog // a Run target's, when it runs alone

	last       error  // the latest failure
	attempted  bool   // an attempt was made
	overflowed bool   // a context overflow happened, compaction and all
	minWindow  int    // after an overflow, only larger windows
	tried      []bool // targets tried as hedges, not to be tried again; nil without Chain.Hedge

	order      []int          // the targets in the order tried (arrange); nil: Targets' order
	cooling    []coolingState // what the call learnt of each target's cool-down; nil without a pool
	lastTarget int            // the target heard out as the last resort, with Chain.LastResort
	orderBuf   [smallPool]int // order's and cooling's room, for chains of a few targets
	coolingBuf [smallPool]coolingState

	keptMu sync.Mutex // guards kept and has: a hedged race's Runs end at once
	kept   Resp       // the value of the latest Run that failed
	has    bool       // kept is set
}

// trail is a call's steps, added to by hedged attempts at once.
type trail struct {
	mu    sync.Mutex // guards steps while attempts run
	steps []Step
	first [2]Step // the first steps, held without an allocation of their own
}

// key returns the name of req's call on target i (see Target.Key).
func (d *chainCall[Req, Resp]) key(i int, req Req) string {
	if t := &d.c.Targets[i]; t.Key != nil {
		return t.Key(req)
	}
	return d.c.Targets[i].Name
}

// lastResort reports whether target i is the chain's last resort.
func (d *chainCall[Req, Resp]) lastResort(i int) bool {
	return d.c.LastResort && i == d.lastTarget
}

// failed ends the call without an answer, with err.
func (d *chainCall[Req, Resp]) failed(err error) (Result[Resp], error) {
	return Result[Resp]{Value: d.kept, Trail: d.trail.steps}, &ChainError{Trail: d.trail.steps, Err: err}
}

// keep holds v, the value a Run returned with its failure, as the one the
// Result carries if nothing answers after it; the one held before goes to
// Chain.Discard.
func (d *chainCall[Req, Resp]) keep(v Resp) {
	d.keptMu.Lock()
	old, had := d.kept, d.has
	d.kept, d.has = v, true
	d.keptMu.Unlock()
	if had && d.c.Discard != nil {
		d.c.Discard(old)
	}
}

// letGo hands the value held from a failed Run, if any, to Chain.Discard:
// another target is tried, or answered.
func (d *chainCall[Req, Resp]) letGo() {
	var zero Resp
	d.keptMu.Lock()
	old, had := d.kept, d.has
	d.kept, d.has = zero, false
	d.keptMu.Unlock()
	if had && d.c.Discard != nil {
		d.c.Discard(old)
	}
}

// skip says why target i, whose call on req is named key, is not to be
// tried now, or "".
func (d *chainCall[Req, Resp]) skip(i int, key string) string {
	t := &d.c.Targets[i]
	switch {
	case d.overflowed && t.ContextWindow <= d.minWindow:
		return "context window too small"
	case d.lastResort(i):
	case d.coolingOf(i, key):
		return "quota exhausted"
	}
	return ""
}

// hedgeTarget is the target that would be tried after place pos, to
// hedge the target there with, or -1: none, or the chain does not hedge.
func (d *chainCall[Req, Resp]) hedgeTarget(pos int, req Req) int {
	if d.c.Hedge == nil || d.sideEffects {
		return -1
	}
	for next := pos + 1; next < len(d.c.Targets); next++ {
		if j := d.at(next); !d.tried[j] && d.skip(j, d.key(j, req)) == "" {
			return j
		}
	}
	return -1
}

// judge takes in target i's failure err (nil: not tried) on the call named
// key: it records it, starts a cool-down for an exhausted quota, notes a
// context overflow, and returns the error that stops the chain, if it
// does; again says that i overflowed and may be tried once more with a
// smaller request, if compact allows.
func (d *chainCall[Req, Resp]) judge(i int, key string, err error, compact bool) (stop error, again bool) {
	if err == nil {
		return nil, false
	}
	t := &d.c.Targets[i]
	var gu *rebound.GiveUpError
	if !errors.As(err, &gu) {
		// Not the engine's word: a Run's own failure, after its attempt.
		gu = &rebound.GiveUpError{Verdict: rebound.Classify(err), Attempts: 1, Err: err}
	}
	if gu.Attempts == 0 {
		// The breaker, or a spend cap, refused before any attempt: a
		// cheaper target may still fit the cap.
		why := "breaker open"
		switch {
		case errors.Is(err, cost.ErrNoPrice):
			why = "no price"
		case gu.Reason == rebound.StopRefused:
			why = "spend cap"
		}
		d.trail.steps = append(d.trail.steps, Step{Target: t.Name, Skipped: why, Err: err})
		if d.last == ErrNoTarget {
			d.last = err
		}
		return nil, false
	}
	if gu.Verdict.Kind != rebound.KindCanceled && (errors.Is(err, ratelimit.ErrNoSlot) || errors.Is(err, ratelimit.ErrQueueFull) || errors.Is(err, ratelimit.ErrOverPace)) {
		// The target's own limits (on requests in flight, or its pace)
		// had no room: the last attempt was never sent, and the next
		// target may have room.
		d.attempted, d.last = d.attempted || gu.Attempts > 1, err
		return nil, false
	}
	d.attempted, d.last = true, err
	if gu.Reason == rebound.StopSideEffects {
		return err, false // the target may have carried it out
	}
	switch gu.Verdict.Kind {
	case rebound.KindPermanent, rebound.KindCanceled:
		return err, false
	case rebound.KindQuotaExhausted:
		if !d.lastResort(i) {
			d.c.coolDown(d.ctx, key, d.clock.Now())
			if d.cooling != nil {
				d.cooling[i] = coolingYes
			}
		}
	case rebound.KindContextOverflow:
		if compact {
			return nil, true
		}
		d.overflowed, d.minWindow = true, max(d.minWindow, t.ContextWindow)
	}
	return nil, false
}
