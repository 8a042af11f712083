package ratelimit_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/rebound-go/rebound/ratelimit"
)

// virtualClock is a rebound.Clock whose Sleep moves it on at once, so that
// the example waits in no time.
type virtualClock struct{ now time.Time }

func (c *virtualClock) Now() time.Time { return c.now }

func (c *virtualClock) Sleep(ctx context.Context, d time.Duration) error {
	c.now = c.now.Add(d)
	return context.Cause(ctx)
}

// A response says that no request is left until the quota resets in 20
// seconds: the next call waits for the reset instead of meeting a 429, and
// then the configured 600 a minute apply again, a second's worth at once.
func ExampleLimiter_Learn() {
	clock := &virtualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	l := ratelimit.New(ratelimit.Config{RequestsPerMinute: 600, Clock: clock})

	h := http.Header{}
	h.Set("x-ratelimit-remaining-requests", "0")
	h.Set("x-ratelimit-reset-requests", "20s")
	l.Learn(h)
	fmt.Println("a call may go now:", l.Allow(1))

	start := clock.Now()
	if err := l.Wait(context.Background(), 1); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("the next call waited", clock.Now().Sub(start))

	n := 0
	for l.Allow(1) {
		n++
	}
	fmt.Println("then at once:", n)
	// Output:
	// a call may go now: false
	// the next call waited 20s
	// then at once: 10
}
