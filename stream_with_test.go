package rebound_test

import (
	"context"
	"errors"
	"iter"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

func isDone(e string) bool { return e == "[DONE]" }

func TestStreamWithEndsHonestly(t *testing.T) {
	cut := errors.New("connection reset mid-stream")
	o := rebound.StreamOptions[string]{Preamble: isPreamble, Done: isDone}
	p := rebound.Policy{BaseDelay: rebound.NoDelay}
	for _, tc := range []struct {
		name    string
		scripts []streamScript
		events  string
		reason  rebound.IncompleteReason // zero: a clean end
		opens   int
	}{
		{"whole", []streamScript{{events: []string{"start", "Hel", "lo", "[DONE]"}}}, "start,Hel,lo,[DONE]", 0, 1},
		{"ended without Done", []streamScript{{events: []string{"start", "Hel", "lo"}}}, "start,Hel,lo", rebound.IncompleteNoEnd, 1},
		{"broken after content", []streamScript{{events: []string{"start", "Hel"}, err: cut}}, "start,Hel", rebound.IncompleteCut, 1},
		{"ended before content: retried", []streamScript{{events: []string{"start"}}, {events: []string{"start", "Hi", "[DONE]"}}}, "start,Hi,[DONE]", 0, 2},
	} {
		open, opens := opener(tc.scripts...)
		events, errs := collect(rebound.StreamWith(context.Background(), p, open, o))
		var ie *rebound.IncompleteStreamError
		switch {
		case strings.Join(events, ",") != tc.events || *opens != tc.opens:
			t.Errorf("%s: events %q, %d opens", tc.name, events, *opens)
		case tc.reason == 0 && len(errs) != 0:
			t.Errorf("%s: errors %v", tc.name, errs)
		case tc.reason != 0 && (len(errs) != 1 || !errors.As(errs[0], &ie) || ie.Reason != tc.reason || ie.Events != len(events)-1):
			t.Errorf("%s: errors %v, want one %v", tc.name, errs, tc.reason)
		case tc.reason == rebound.IncompleteCut && !errors.Is(errs[0], cut):
			t.Errorf("%s: %v does not wrap the cause", tc.name, errs[0])
		}
	}
}

// stalling opens streams that send events, then wait on their context.
func stalling(events ...string) (func(context.Context) iter.Seq2[string, error], *int) {
	opens := 0
	return func(ctx context.Context) iter.Seq2[string, error] {
		opens++
		n := opens
		return func(yield func(string, error) bool) {
			for _, e := range events {
				if !yield(e, nil) {
					return
				}
			}
			if n > 1 {
				yield("[DONE]", nil)
				return
			}
			<-ctx.Done()
			yield("", context.Cause(ctx))
		}
	}, &opens
}

func TestStreamWithCutsAStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := rebound.StreamOptions[string]{Preamble: isPreamble, Done: isDone, Stall: 10 * time.Second}
		p := rebound.Policy{BaseDelay: rebound.NoDelay}
		// Before content: retried.
		open, opens := stalling("start")
		start := time.Now()
		events, errs := collect(rebound.StreamWith(t.Context(), p, open, o))
		if strings.Join(events, ",") != "start,[DONE]" || len(errs) != 0 || *opens != 2 || time.Since(start) != 10*time.Second {
			t.Fatalf("before content: events %q, errors %v, %d opens after %v", events, errs, *opens, time.Since(start))
		}
		// After content: the caller's, cut at the bound; the caller's
		// own time in its loop does not count.
		open, opens = stalling("start", "Hel")
		start = time.Now()
		var got []string
		var ie *rebound.IncompleteStreamError
		for e, err := range rebound.StreamWith(t.Context(), p, open, o) {
			if err != nil {
				if !errors.As(err, &ie) || ie.Reason != rebound.IncompleteStalled || ie.Events != 1 {
					t.Fatalf("error %v", err)
				}
				break
			}
			got = append(got, e)
			time.Sleep(time.Minute)
		}
		if ie == nil || *opens != 1 || time.Since(start) != 2*time.Minute+10*time.Second {
			t.Fatalf("after content: events %q, %d opens after %v", got, *opens, time.Since(start))
		}
	})
}

// Stall bounds open itself: an open that makes its request eagerly (as
// SDK streaming calls do) and hangs until its context ends is cut at
// Stall and retried, not left to the caller's own deadline.
func TestStreamWithStallBoundsOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Hour) // a watchdog
		defer cancel()
		var opens atomic.Int32
		open := func(ctx context.Context) iter.Seq2[string, error] {
			if opens.Add(1) == 1 {
				<-ctx.Done() // waiting for headers that never come
				err := context.Cause(ctx)
				return func(yield func(string, error) bool) { yield("", err) }
			}
			return func(yield func(string, error) bool) { yield("hi", nil) }
		}
		start := time.Now()
		var got []string
		var failed error
		for ev, err := range rebound.StreamWith(ctx, rebound.Policy{BaseDelay: rebound.NoDelay}, open, rebound.StreamOptions[string]{Stall: time.Second}) {
			if err != nil {
				failed = err
				break
			}
			got = append(got, ev)
		}
		if took := time.Since(start); failed != nil || took != time.Second || strings.Join(got, ",") != "hi" {
			t.Errorf("read %q, %v after %v; want the retry's \"hi\" after the 1s stall bound", got, failed, took)
		}
	})
}
