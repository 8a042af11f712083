package testclock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/testclock"
)

var _ rebound.Clock = (*testclock.Clock)(nil)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	start := time.Date(1969, 12, 31, 23, 59, 0, 0, time.UTC)
	c := testclock.New(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	c.Add(-time.Hour)
	if got := c.Now(); !got.Equal(start.Add(-time.Hour)) {
		t.Fatalf("after Add(-1h): %v", got)
	}
	c.Set(start)
	if err := c.Sleep(context.Background(), 90*time.Second); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if got := c.Now(); !got.Equal(start.Add(90 * time.Second)) {
		t.Fatalf("after Sleep(90s): %v", got)
	}
	if err := c.Sleep(context.Background(), -time.Second); err != nil || !c.Now().Equal(start.Add(90*time.Second)) {
		t.Fatalf("Sleep(-1s) = %v and moved the clock to %v", err, c.Now())
	}
	var zero testclock.Clock
	if !zero.Now().IsZero() {
		t.Fatalf("the zero Clock reads %v", zero.Now())
	}
}

func TestSleepOnADoneContextReturnsItsCause(t *testing.T) {
	c := testclock.New(time.Unix(0, 0))
	cause := errors.New("the caller left")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := c.Sleep(ctx, time.Minute); err != cause {
		t.Fatalf("Sleep = %v, want %v", err, cause)
	}
	if !c.Now().Equal(time.Unix(0, 0)) {
		t.Fatalf("a sleep on a done context moved the clock to %v", c.Now())
	}
}
