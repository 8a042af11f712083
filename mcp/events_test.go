package reboundmcp

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
)

// serverEvents collects the events about a server as a whole.
type serverEvents struct {
	mu   sync.Mutex
	seen []string
}

func (s *serverEvents) Observe(e rebound.Event) {
	if e.Type != rebound.EventRestart && e.Type != rebound.EventBreaker {
		return
	}
	line := fmt.Sprintf("%v %s", e.Type, e.Target)
	if e.Type == rebound.EventRestart {
		line += fmt.Sprintf(" start %d", e.Attempt)
	} else {
		line += " " + e.State
	}
	line += fmt.Sprintf(" after %v", e.Wait)
	if e.Err != nil {
		line += " (" + e.Err.Error() + ")"
	}
	s.mu.Lock()
	s.seen = append(s.seen, line)
	s.mu.Unlock()
}

func (s *serverEvents) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.seen, "\n")
}

func TestObserverSeesRestartsAndTheRespawnBreakerOpenProbeAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		f.dialErr = func(n int) error {
			if n == 2 {
				return errRefused
			}
			return nil
		}
		var events serverEvents
		o := Options{Observer: &events, CrashLimit: 2, CrashCooldown: 10 * time.Second, HealthyAfter: 5 * time.Second}
		connect(t, f, o, true, nil)
		synctest.Wait()
		f.crash()        // restarted at once, into a refused start: two crashes open the breaker
		f.awaitStarts(3) // the probe, after the cool-down
		time.Sleep(5 * time.Second)
		synctest.Wait() // the probe ran healthily: closed
		want := strings.Join([]string{
			"restart mcp:fake start 2 after 0s (the server process exited)",
			"breaker mcp:fake open after 10s (refused)",
			"breaker mcp:fake half-open after 0s",
			"breaker mcp:fake closed after 0s",
		}, "\n")
		if got := events.String(); got != want {
			t.Fatalf("events\n%s\nwant\n%s", got, want)
		}
	})
}

func TestServerEventsGoToThePolicysObserverWhenOptionsHaveNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		var events serverEvents
		connect(t, f, Options{Policy: rebound.Policy{Observer: &events}}, true, nil)
		synctest.Wait()
		f.crash()
		f.awaitStarts(2)
		if got, want := events.String(), "restart mcp:fake start 2 after 0s (the server process exited)"; got != want {
			t.Fatalf("events\n%s\nwant\n%s", got, want)
		}
	})
}
