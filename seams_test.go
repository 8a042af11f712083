package rebound_test

import (
	"testing"

	"github.com/rebound-go/rebound"
)

func TestEventTypesNameWhatTheyReport(t *testing.T) {
	for typ, want := range map[rebound.EventType]string{
		rebound.EventAttempt:  "attempt",
		rebound.EventRetry:    "retry",
		rebound.EventGiveUp:   "give_up",
		rebound.EventContinue: "continue",
		rebound.EventHedge:    "hedge",
		rebound.EventRestart:  "restart",
		rebound.EventBreaker:  "breaker",
		rebound.EventType(99): "event(99)",
	} {
		if got := typ.String(); got != want {
			t.Errorf("EventType(%d).String() = %q, want %q", typ, got, want)
		}
	}
}
