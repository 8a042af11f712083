package rebound_test

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// script of one attempt: the events it yields, then its error (nil: a
// clean end).
type streamScript struct {
	events []string
	err    error
}

// opener returns an open function that plays the scripts in turn, and a
// count of how often it was called.
func opener(scripts ...streamScript) (func(context.Context) iter.Seq2[string, error], *int) {
	opens := 0
	return func(context.Context) iter.Seq2[string, error] {
		s := scripts[min(opens, len(scripts)-1)]
		opens++
		return func(yield func(string, error) bool) {
			for _, e := range s.events {
				if !yield(e, nil) {
					return
				}
			}
			if s.err != nil {
				yield("", s.err)
			}
		}
	}, &opens
}

func isPreamble(e string) bool { return strings.HasPrefix(e, "start") || e == "ping" }

func collect(seq iter.Seq2[string, error]) (events []string, errs []error) {
	for e, err := range seq {
		if err != nil {
			errs = append(errs, err)
			continue
		}
		events = append(events, e)
	}
	return events, errs
}

var overloadedStream = &rebound.HTTPError{StatusCode: 529}

func TestStreamRetriesBeforeTheFirstEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		open, opens := opener(
			streamScript{err: overloadedStream},
			streamScript{events: []string{"start", "ping"}, err: overloadedStream}, // preamble only: still safe
			streamScript{events: []string{"start", "ping", "Hel", "lo"}},
		)
		events, errs := collect(rebound.Stream(t.Context(), rebound.Policy{MaxAttempts: 3, BaseDelay: time.Second, Jitter: rebound.JitterNone}, open, isPreamble))
		if got := strings.Join(events, ","); got != "start,ping,Hel,lo" || len(errs) != 0 || *opens != 3 {
			t.Fatalf("events %q, errors %v, %d opens", got, errs, *opens)
		}
	})
}

func TestStreamNeverRetriesAfterAnEvent(t *testing.T) {
	broken := errors.New("connection reset mid-stream")
	open, opens := opener(streamScript{events: []string{"start", "Hel"}, err: broken}, streamScript{events: []string{"never"}})
	events, errs := collect(rebound.Stream(context.Background(), rebound.Policy{BaseDelay: rebound.NoDelay}, open, isPreamble))
	if got := strings.Join(events, ","); got != "start,Hel" || len(errs) != 1 || errs[0] != broken || *opens != 1 {
		t.Fatalf("events %q, errors %v, %d opens", got, errs, *opens)
	}
}

func TestStreamGivesUp(t *testing.T) {
	open, opens := opener(streamScript{events: []string{"start"}, err: &rebound.HTTPError{StatusCode: 400}})
	events, errs := collect(rebound.Stream(context.Background(), rebound.Policy{}, open, isPreamble))
	var gu *rebound.GiveUpError
	if len(events) != 0 || len(errs) != 1 || !errors.As(errs[0], &gu) || gu.Reason != rebound.StopNotRetryable || *opens != 1 {
		t.Fatalf("events %v, errors %v, %d opens", events, errs, *opens)
	}
	open, opens = opener(streamScript{err: overloadedStream})
	_, errs = collect(rebound.Stream(context.Background(), rebound.Policy{BaseDelay: rebound.NoDelay}, open, nil))
	if len(errs) != 1 || !errors.As(errs[0], &gu) || gu.Attempts != 2 || *opens != 2 { // an overload: one quick retry
		t.Fatalf("errors %v, %d opens", errs, *opens)
	}
	open, opens = opener(streamScript{err: overloadedStream})
	_, errs = collect(rebound.Stream(context.Background(), rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay}, open, nil))
	if len(errs) != 1 || !errors.As(errs[0], &gu) || gu.Attempts != 3 || *opens != 3 {
		t.Fatalf("errors %v, %d opens", errs, *opens)
	}
}

func TestStreamCallerStopsEarly(t *testing.T) {
	open, opens := opener(streamScript{events: []string{"a", "b", "c"}})
	for e := range rebound.Stream(context.Background(), rebound.Policy{}, open, nil) {
		if e == "b" {
			break
		}
	}
	if *opens != 1 {
		t.Fatalf("%d opens", *opens)
	}
}

func TestStreamSideEffectsOpenOnce(t *testing.T) {
	open, opens := opener(streamScript{err: overloadedStream}, streamScript{events: []string{"x"}})
	_, errs := collect(rebound.Stream(rebound.WithSideEffects(context.Background()), rebound.Policy{BaseDelay: rebound.NoDelay}, open, nil))
	if len(errs) != 1 || *opens != 1 {
		t.Fatalf("errors %v, %d opens", errs, *opens)
	}
}

// recordingBreaker is a Breaker that allows everything and notes outcomes.
type recordingBreaker struct{ outcomes []rebound.Outcome }

func (b *recordingBreaker) Allow() (rebound.Permit, error) { return 0, nil }
func (b *recordingBreaker) Done(_ rebound.Permit, o rebound.Outcome) {
	b.outcomes = append(b.outcomes, o)
}

func TestStreamTellsTheBreakerWhenItEnds(t *testing.T) {
	b := &recordingBreaker{}
	open, _ := opener(streamScript{err: overloadedStream}, streamScript{events: []string{"a"}, err: errors.New("cut")})
	seen := 0
	for _, err := range rebound.Stream(context.Background(), rebound.Policy{BaseDelay: rebound.NoDelay, Breaker: b}, open, nil) {
		seen++
		if err == nil && len(b.outcomes) != 1 {
			t.Fatalf("outcomes while the stream is still open: %v", b.outcomes)
		}
	}
	if want := []rebound.Outcome{rebound.OutcomeFailure, rebound.OutcomeFailure}; fmt.Sprint(b.outcomes) != fmt.Sprint(want) || seen != 2 {
		t.Fatalf("outcomes %v, %d yields", b.outcomes, seen)
	}
}

// A model's stream fails once before its first token; the caller sees one
// clean stream.
func ExampleStream() {
	attempt := 0
	open := func(ctx context.Context) iter.Seq2[string, error] {
		attempt++
		return func(yield func(string, error) bool) {
			if !yield("message_start", nil) {
				return
			}
			if attempt == 1 {
				yield("", &rebound.HTTPError{StatusCode: 529}) // overloaded, before any text
				return
			}
			for _, tok := range []string{"Hello", ", ", "world"} {
				if !yield(tok, nil) {
					return
				}
			}
		}
	}
	preamble := func(e string) bool { return e == "message_start" }
	for tok, err := range rebound.Stream(context.Background(), rebound.Policy{BaseDelay: rebound.NoDelay}, open, preamble) {
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("%q ", tok)
	}
	fmt.Println()
	// Output: "message_start" "Hello" ", " "world"
}
