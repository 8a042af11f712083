package callctx

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time                           { return c.t }
func (fixedClock) Sleep(context.Context, time.Duration) error { return nil }

func TestMarks(t *testing.T) {
	ctx := context.Background()
	if ClockOf(ctx) != Real || Target(ctx) != "" || SideEffects(ctx) {
		t.Fatal("an unmarked context carries marks")
	}
	c := fixedClock{time.Unix(1, 0)}
	ctx = WithSideEffects(WithTarget(WithClock(ctx, c), "gpt-x:summarise"))
	if ClockOf(ctx) != c || Target(ctx) != "gpt-x:summarise" || !SideEffects(ctx) {
		t.Errorf("marks read back as %v, %q, %v", ClockOf(ctx), Target(ctx), SideEffects(ctx))
	}
}

func TestTargetPassesTheParentsValuesAndCancellation(t *testing.T) {
	type otherKey struct{}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), otherKey{}, 7))
	ctx, stop := context.WithCancel(WithTarget(parent, "upstream-a"))
	defer stop()
	inner := WithTarget(ctx, "upstream-b")
	if got := Target(inner); got != "upstream-b" {
		t.Errorf("the nearest target reads %q, want upstream-b", got)
	}
	if got := Target(ctx); got != "upstream-a" {
		t.Errorf("the outer target reads %q through a cancel context, want upstream-a", got)
	}
	if got := inner.Value(otherKey{}); got != 7 {
		t.Errorf("a parent's value reads %v through the target, want 7", got)
	}
	cancel()
	<-inner.Done() // the parent's cancellation reaches the child
	if !errors.Is(inner.Err(), context.Canceled) {
		t.Errorf("the child ended with %v, want context.Canceled", inner.Err())
	}
}

func TestRealSleepEndsWithTheContextsCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		if err := Real.Sleep(context.Background(), time.Second); err != nil {
			t.Fatalf("a full sleep returned %v", err)
		}
		cause := errors.New("gone")
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(time.Second, func() { cancel(cause) })
		start := time.Now()
		if err := Real.Sleep(ctx, time.Hour); err != cause {
			t.Fatalf("a cut sleep returned %v, want the cause", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Errorf("slept %v, want 1s", waited)
		}
		if err := Real.Sleep(ctx, 0); err != cause {
			t.Errorf("a zero sleep on a done context returned %v", err)
		}
	})
}
