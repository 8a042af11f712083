package batchrun

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/batch"
	"github.com/rebound-go/rebound/ratelimit"
)

// waits follows what a run's requests wait for, as far as the command
// sees it from outside batch.Runner: the retries its policy schedules
// (their observer: a backoff, or a wait the provider asked for), the pace
// of the rate limit (its Pacer), the slots of its adaptive limit, and the
// journal (a run that shares one with other workers waits for theirs).
// Its methods are safe for concurrent use; a nil *waits knows nothing.
type waits struct {
	concurrency int
	adaptive    *ratelimit.Adaptive

	pacing atomic.Int64 // requests waiting for the rate limit's pace

	mu             sync.Mutex // guards the fields below
	retries        []retryWait
	claimedNothing bool // the last claim found nothing to send
	elsewhere      int  // requests the journal holds in flight or pending, at its last count
}

// retryWait is a retry's wait: until when, and whether the provider asked
// for it (a Retry-After) or the policy's backoff chose it.
type retryWait struct {
	until time.Time
	asked bool
}

// Observe notes the waits of the retries the policy schedules.
func (w *waits) Observe(e rebound.Event) {
	if e.Type != rebound.EventRetry {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.retries = append(w.retries, retryWait{until: time.Now().Add(e.Wait), asked: e.Verdict.HasServerWait})
}

// pacer is a Pacer whose waits are counted.
type pacer struct {
	ratelimit.Pacer
	w *waits
}

func (p pacer) Wait(ctx context.Context, tokens int) error {
	p.w.pacing.Add(1)
	defer p.w.pacing.Add(-1)
	return p.Pacer.Wait(ctx, tokens)
}

// journal is a Journal whose claims and counts are noted.
type journal struct {
	batch.Journal
	w *waits
}

func (j journal) Claim(ctx context.Context, n int) ([]batch.Claim, error) {
	c, err := j.Journal.Claim(ctx, n)
	j.w.mu.Lock()
	j.w.claimedNothing = err == nil && len(c) == 0
	j.w.mu.Unlock()
	return c, err
}

func (j journal) Counts(ctx context.Context) (batch.Counts, error) {
	c, err := j.Journal.Counts(ctx)
	if err == nil {
		j.w.mu.Lock()
		j.w.elsewhere = c.InFlight + c.Pending
		j.w.mu.Unlock()
	}
	return c, err
}

// waitState is what a run waits for at one moment.
type waitState struct {
	sending        int           // requests sent and not answered
	backoff, asked int           // retries waiting out their backoff, or a wait the provider asked for
	backoffLeft    time.Duration // the longest of those waits left
	askedLeft      time.Duration
	pacing         int // requests waiting for the rate limit's pace
	limit, ofLimit int // the limit on requests in flight, cut below ofLimit and full; zero if not
	others         int // requests other workers hold, when this run has none
}

// at returns what the run waits for at now, with inFlight of its requests
// claimed and not yet recorded; it forgets the retry waits over by now.
func (w *waits) at(now time.Time, inFlight int) waitState {
	var s waitState
	if w == nil {
		s.sending = inFlight
		return s
	}
	w.mu.Lock()
	kept := w.retries[:0]
	for _, r := range w.retries {
		if left := r.until.Sub(now); left > 0 {
			kept = append(kept, r)
			if r.asked {
				s.asked, s.askedLeft = s.asked+1, max(s.askedLeft, left)
			} else {
				s.backoff, s.backoffLeft = s.backoff+1, max(s.backoffLeft, left)
			}
		}
	}
	w.retries = kept
	if inFlight == 0 && w.claimedNothing {
		s.others = w.elsewhere
	}
	w.mu.Unlock()
	s.pacing = int(w.pacing.Load())
	if a := w.adaptive; a != nil && a.Limit() < w.concurrency && a.InFlight() >= a.Limit() {
		s.limit, s.ofLimit = a.Limit(), w.concurrency
	}
	s.sending = max(0, inFlight-s.backoff-s.asked-s.pacing)
	return s
}

// retrying is how many retries wait to be made.
func (s waitState) retrying() int { return s.backoff + s.asked }

// text says what the run waits for, after the progress counts: "" for
// nothing.
func (s waitState) text() string { return s.say(true) }

// key is text without the times left, which change every second.
func (s waitState) key() string { return s.say(false) }

func (s waitState) say(times bool) string {
	var items []string
	add := func(n int, one, many string, a ...any) {
		switch {
		case n == 1:
			items = append(items, fmt.Sprintf(one, a...))
		case n > 1:
			items = append(items, fmt.Sprintf("%d "+many, append([]any{n}, a...)...))
		}
	}
	left := func(d time.Duration) string {
		if !times {
			return ""
		}
		return fmt.Sprintf(" (%v left)", d.Round(time.Second))
	}
	add(s.sending, "the answer to 1 request", "requests' answers")
	add(s.backoff, "1 retry's backoff%s", "retries' backoff%s", left(s.backoffLeft))
	add(s.asked, "1 wait the provider asked for%s", "waits the provider asked for%s", left(s.askedLeft))
	add(s.pacing, "the rate limit's pace for 1 request", "requests paced by the rate limit")
	if s.limit > 0 {
		items = append(items, fmt.Sprintf("a free slot (the limit on requests in flight is cut to %d of %d after overloads)", s.limit, s.ofLimit))
	}
	if s.others > 0 {
		items = append(items, fmt.Sprintf("other workers' claims (%d requests they hold or are taking)", s.others))
	}
	if len(items) == 0 {
		return ""
	}
	return "; waiting for " + strings.Join(items, ", ")
}
