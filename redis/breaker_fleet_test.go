package reboundredis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/redis/go-redis/v9"
)

// fleetCooldown is the cooldown of the breaker the processes share: long
// enough for the three that did not trip it to make their next call
// before it ends, however slow the machine.
const fleetCooldown = 2 * time.Second

func init() { children["breaker"] = breakerChild }

// childStore is a child's Store on the parent's Redis and prefix, with the
// tests' patience: these tests are of the shared state, not of its loss.
func childStore(args []string) (*Store, redis.UniversalClient, error) {
	cfg, err := open(childArg(args, "redis"))
	if err != nil {
		return nil, nil, err
	}
	cfg.Prefix = childArg(args, "prefix")
	s, err := New(cfg)
	return s, cfg.Client, err
}

// signal and await pass word between the processes, on Redis lists.
func signal(c redis.UniversalClient, s *Store, list string, n int) error {
	for range n {
		if err := c.RPush(context.Background(), s.key("test", list), "x").Err(); err != nil {
			return err
		}
	}
	return nil
}

func await(c redis.UniversalClient, s *Store, list string, n int) error {
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
		err := c.BLPop(ctx, 20*time.Second, s.key("test", list)).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", list, err)
		}
	}
	return nil
}

// breakerChild is one of four processes behind one Redis breaker (3
// failures in a row, one probe, one success to close). Each makes a call
// while it is closed; child 0 then trips it, the others' next call is
// refused; after the cooldown all four call at once, and one probe goes
// through while the others are held back; its success closes the breaker
// for all.
func breakerChild(args []string) error {
	s, c, err := childStore(args)
	if err != nil {
		return err
	}
	me := childArg(args, "child")
	b := NewBreaker(s, "upstream", breaker.Config{ConsecutiveFailures: 3, FailureRate: -1,
		Cooldown: fleetCooldown, Probes: 1, Successes: 1})
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{MaxAttempts: 1, Breaker: b}}}
	call := func(phase string) error {
		resp, err := client.Get(childArg(args, "upstream") + "/" + phase + "?child=" + me)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: status %d", phase, resp.StatusCode)
		}
		return nil
	}

	if err := call("warm"); err != nil {
		return err
	}
	if me == "0" {
		if err := await(c, s, "ready", 3); err != nil {
			return err
		}
		for n := 0; !errors.Is(err, breaker.ErrOpen); n++ {
			if n > 5 {
				return fmt.Errorf("not open after %d failures: %v", n, err)
			}
			err = call("fail")
		}
		fmt.Println("tripped")
		if err := signal(c, s, "tripped", 3); err != nil {
			return err
		}
	} else {
		if err := signal(c, s, "ready", 1); err != nil {
			return err
		}
		if err := await(c, s, "tripped", 1); err != nil {
			return err
		}
		if err := call("refused"); !errors.Is(err, breaker.ErrOpen) {
			return fmt.Errorf("the next call after another process tripped the breaker: %v; want it refused", err)
		}
		fmt.Println("refused")
	}

	for {
		err := call("recover")
		var oe *breaker.OpenError
		switch {
		case err == nil:
			fmt.Println("probed")
			return signal(c, s, "closed", 3)
		case errors.As(err, &oe) && oe.State == breaker.Open:
			time.Sleep(time.Until(oe.Until) + time.Millisecond) // the cooldown's end, as the refusal says
		case errors.As(err, &oe) && oe.State == breaker.HalfOpen:
			fmt.Println("held back")
			if err := signal(c, s, "held", 1); err != nil {
				return err
			}
			if err := await(c, s, "closed", 1); err != nil {
				return err
			}
			if err := call("closed"); err != nil {
				return fmt.Errorf("after the probe closed the breaker: %w", err)
			}
			fmt.Println("closed")
			return nil
		default:
			return err
		}
	}
}

// A breaker tripped in one process refuses in the others on their next
// call; with four processes and one probe allowed, exactly one probe
// reaches the recovering upstream, which answers only once the other
// three have been held back.
func TestBreakerAcrossProcesses(t *testing.T) {
	cfg := testConfig(t, redisURL())
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen = map[string][]string{} // phase → the children whose requests reached the upstream
	)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		phase := strings.TrimPrefix(r.URL.Path, "/")
		mu.Lock()
		seen[phase] = append(seen[phase], r.URL.Query().Get("child"))
		mu.Unlock()
		switch phase {
		case "fail":
			w.WriteHeader(http.StatusServiceUnavailable)
		case "recover":
			// Recovering, and slow to say so: it answers the probe only
			// when every other process has asked and been held back.
			if err := await(cfg.Client, s, "held", 3); err != nil {
				t.Error(err)
				w.WriteHeader(http.StatusServiceUnavailable)
			}
		}
	}))
	defer upstream.Close()

	out := runChildren(t, 4, "breaker", 60*time.Second,
		"redis="+redisURL(), "prefix="+cfg.Prefix, "upstream="+upstream.URL)

	mu.Lock()
	defer mu.Unlock()
	for phase, want := range map[string]int{"warm": 4, "fail": 3, "refused": 0, "recover": 1, "closed": 3} {
		if got := len(seen[phase]); got != want {
			t.Errorf("%d requests reached the upstream in phase %s (from children %v); want %d", got, phase, seen[phase], want)
		}
	}
	var lines []string
	for _, l := range out {
		lines = append(lines, l...)
	}
	slices.Sort(lines)
	want := []string{"closed", "closed", "closed", "held back", "held back", "held back", "probed", "refused", "refused", "refused", "tripped"}
	if !slices.Equal(lines, want) {
		t.Errorf("the children said %q; want %q", lines, want)
	}
}
