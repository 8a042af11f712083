package breaker

import (
	"fmt"
	"slices"
	"time"

	"github.com/rebound-go/rebound"
)

// probe is a half-open probe in flight.
type probe struct {
	ticket uint64
	at     time.Time // when it was allowed
}

// allowProbe is Allow for a breaker found open or half-open. Probes are
// counted under b.mu, with the state they belong to: a count made apart
// from its state could land in a later half-open spell and hold its slot
// for good.
func (b *Breaker) allowProbe() (rebound.Permit, error) {
	now := b.now()
	if State(b.state.Load()&3) == Open {
		if left := b.cooldownLeft(now); left > 0 {
			return 0, &OpenError{Name: b.name, State: Open, Until: now.Add(left)}
		}
	}
	b.mu.Lock()
	s := b.state.Load()
	entered := false
	switch State(s & 3) {
	case Closed:
		b.mu.Unlock()
		return rebound.Permit(s), nil
	case Open:
		if left := b.cooldownLeft(now); left > 0 {
			b.mu.Unlock()
			return 0, &OpenError{Name: b.name, State: Open, Until: now.Add(left)}
		}
		b.move(s, HalfOpen, now)
		entered = true
	}
	if len(b.probes) >= b.cfg.Probes {
		b.reclaim(now)
	}
	if len(b.probes) >= b.cfg.Probes {
		b.mu.Unlock()
		return 0, &OpenError{Name: b.name, State: HalfOpen}
	}
	b.tickets++
	ticket := b.tickets
	b.probes = append(b.probes, probe{ticket: ticket, at: now})
	b.mu.Unlock()
	if entered {
		b.notify(Open, HalfOpen, now, "cooldown over")
	}
	return rebound.Permit(ticket<<2 | uint64(HalfOpen)), nil
}

// cooldownLeft returns how much of the cooldown is left at now. A clock
// that went back restarts the cooldown from now, rather than keeping the
// breaker open for as long as the clock stepped back.
func (b *Breaker) cooldownLeft(now time.Time) time.Duration {
	at, opened := now.UnixNano(), b.openedAt.Load()
	elapsed := time.Duration(at - opened)
	if elapsed < 0 {
		b.openedAt.CompareAndSwap(opened, at)
		elapsed = 0
	}
	return b.cfg.Cooldown - elapsed
}

// reclaim forgets the probes that have not reported back within
// ProbeTimeout. b.mu is held.
func (b *Breaker) reclaim(now time.Time) {
	b.probes = slices.DeleteFunc(b.probes, func(p probe) bool { return now.Sub(p.at) >= b.cfg.ProbeTimeout })
	for i := range b.probes {
		if b.probes[i].at.After(now) {
			b.probes[i].at = now // the clock went back: count from now, so that the bound holds
		}
	}
}

// doneProbe records the outcome of the probe with ticket. A ticket no
// longer in flight (issued in an earlier half-open spell, or reclaimed)
// moves nothing.
func (b *Breaker) doneProbe(ticket uint64, o rebound.Outcome) {
	now := b.now()
	b.mu.Lock()
	s := b.state.Load()
	i := slices.IndexFunc(b.probes, func(p probe) bool { return p.ticket == ticket })
	if State(s&3) != HalfOpen || i < 0 {
		b.mu.Unlock()
		return
	}
	b.probes = slices.Delete(b.probes, i, i+1)
	var (
		to     State
		reason string
	)
	switch o {
	case rebound.OutcomeSuccess:
		if b.successes++; b.successes < b.cfg.Successes {
			b.mu.Unlock()
			return
		}
		to, reason = Closed, fmt.Sprintf("%d probes succeeded", b.cfg.Successes)
	case rebound.OutcomeFailure:
		to, reason = Open, "a probe failed"
	default:
		b.mu.Unlock()
		return
	}
	b.move(s, to, now)
	b.mu.Unlock()
	b.notify(HalfOpen, to, now, reason)
}
