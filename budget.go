package rebound

import (
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/window"
)

// Budget caps the retries of all the calls to one target, so that a fleet
// of clients cannot multiply the load on a provider that is already
// failing. Do, Transport and Stream deposit for every first attempt and
// withdraw for every retry; a refused withdrawal stops the call with
// StopRetryBudget. RetryBudget is the standard one.
type Budget interface {
	// Deposit records a first attempt made at now.
	Deposit(now time.Time)
	// Withdraw asks to spend one retry at now; false means the budget is
	// spent.
	Withdraw(now time.Time) bool
	// Refund gives back a retry withdrawn at the time at that was never
	// made: its wait was cut short, or a breaker refused it.
	Refund(at time.Time)
	// Available returns how many retries the budget would allow at now,
	// for events and metrics.
	Available(now time.Time) float64
}

// budgetSlots is how many pieces the TTL window is cut into.
const budgetSlots = 10

// RetryBudget is a token bucket of retries, as in Finagle's RetryBudget
// and gRPC's retry throttling: every first attempt deposits Ratio of a
// token, every retry spends one, and deposits and spending are forgotten
// after TTL. A reserve of MinPerSecond·TTL tokens lets a quiet client
// retry. Under a full outage the retries are capped near Ratio of the
// calls, so the load stays near 1 + Ratio of the calls instead of
// MaxAttempts times it; when a few calls fail, they retry as the policy
// says.
//
// Its zero value is ready to use, with each field's default; set the
// fields before first use. It is safe for concurrent use.
type RetryBudget struct {
	// Ratio is the share of a token each first attempt deposits. Zero
	// means 0.1: retries are at most about 10% of calls, beyond the
	// reserve.
	Ratio float64
	// MinPerSecond is the reserve: this many retries a second are always
	// allowed, on average over TTL. Zero means 10; negative means no
	// reserve.
	MinPerSecond float64
	// TTL is how long deposits and retries are remembered. Zero means
	// 10 s.
	TTL time.Duration

	mu    sync.Mutex // guards slots
	slots [budgetSlots]budgetSlot
}

type budgetSlot struct {
	epoch                 int64 // which slot-long stretch of time the counts are from
	deposits, withdrawals float64
}

func (b *RetryBudget) ttl() time.Duration {
	if b.TTL <= 0 {
		return defaultBudgetTTL
	}
	return b.TTL
}

func (b *RetryBudget) ratio() float64 {
	if b.Ratio <= 0 {
		return defaultBudgetRatio
	}
	return b.Ratio
}

func (b *RetryBudget) reserve() float64 {
	switch {
	case b.MinPerSecond < 0:
		return 0
	case b.MinPerSecond == 0:
		return defaultBudgetMinPerSecond * b.ttl().Seconds()
	}
	return b.MinPerSecond * b.ttl().Seconds()
}

// epoch returns which slot-long stretch of time now falls in.
func (b *RetryBudget) epoch(now time.Time) int64 {
	return window.Epoch(now, max(int64(b.ttl())/budgetSlots, 1))
}

// slot returns the slot of now, emptied first if it held another stretch
// of time (an older one, or a later one if the clock went back). b.mu is
// held.
func (b *RetryBudget) slot(now time.Time) *budgetSlot {
	epoch := b.epoch(now)
	s := &b.slots[window.Slot(epoch, budgetSlots)]
	if s.epoch != epoch {
		*s = budgetSlot{epoch: epoch}
	}
	return s
}

// available returns the tokens left at now. b.mu is held.
func (b *RetryBudget) available(now time.Time) float64 {
	epoch := b.epoch(now)
	var deposits, withdrawals float64
	for _, s := range b.slots {
		// A difference, not a comparison, so that epochs far apart
		// cannot overflow into the window.
		if d := epoch - s.epoch; d >= 0 && d < budgetSlots {
			deposits += s.deposits
			withdrawals += s.withdrawals
		}
	}
	return b.reserve() + b.ratio()*deposits - withdrawals
}

func newRetryBudget() *RetryBudget { return new(RetryBudget) }

// Deposit records a first attempt.
func (b *RetryBudget) Deposit(now time.Time) {
	b.mu.Lock()
	b.slot(now).deposits++
	b.mu.Unlock()
}

// Withdraw spends one retry if at least one token is left.
func (b *RetryBudget) Withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.available(now) < 1 {
		return false
	}
	b.slot(now).withdrawals++
	return true
}

// Refund gives back a retry that was withdrawn at the time at but never
// made (its wait was cut short, or a breaker refused it). Do, Transport and
// Stream call it with the time of the withdrawal, which may be a long wait
// ago. A withdrawal the budget has
// already forgotten (more than TTL ago) is not refunded: the deposits it
// was drawn against are forgotten too, and a refund now would make a token
// nobody deposited.
func (b *RetryBudget) Refund(at time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	epoch := b.epoch(at)
	if s := &b.slots[window.Slot(epoch, budgetSlots)]; s.epoch == epoch && s.withdrawals >= 1 {
		s.withdrawals--
	}
}

// Available returns how many retries the budget would allow at now.
func (b *RetryBudget) Available(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(b.available(now), 0)
}
