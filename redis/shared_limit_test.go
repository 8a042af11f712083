package reboundredis

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound/ratelimit"
)

// The done-when of the shared limits: 4 processes, started on one signal,
// send as fast as a shared Limiter lets them for 120 s of real time to an
// upstream in this process, which notes when each request arrives, and
// when, as its sender knows, the Limiter let it go (its slot). No 60 s
// window there may see more than the limit, and the time from the first
// arrival to the run's end must see at least 97% of what the limit allows
// in it. The two tests run in parallel, so that the suite pays their 120 s
// once.
//
// The Limiter keeps the limit with a margin: a call that reaches the
// upstream up to half a second later after its slot than another cannot
// push a window over it. A machine that other test runs keep busy delays
// calls by more than that, and by then the limit is not the Limiter's to
// keep: a window may see what the pace adds in the time the calls' delays
// differ beyond the margin, which the test measures, and no more.
const (
	sharedRun       = 120 * time.Second
	sharedProcesses = 4
	sharedSenders   = 8 // goroutines per process, each with a call waiting
)

func init() { children["pace"] = paceChild }

// arrival is one request at the upstream: when it arrived, its tokens,
// and the earliest and latest its slot may have been.
type arrival struct {
	at, early, late time.Time
	tokens          int
}

// upstream records every request's arrival and the tokens it says it
// costs.
type upstream struct {
	mu      sync.Mutex // guards arrived
	arrived []arrival
	*httptest.Server
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		tokens, _ := strconv.Atoi(r.Header.Get("X-Tokens"))
		var early, late int64
		fmt.Sscan(r.Header.Get("X-Slot"), &early, &late)
		u.mu.Lock()
		u.arrived = append(u.arrived, arrival{now, time.Unix(0, early), time.Unix(0, late), tokens})
		u.mu.Unlock()
		w.Write([]byte("{}"))
	}))
	t.Cleanup(u.Close)
	return u
}

// check reports the most any 60 s window saw (requests, or tokens when
// tokens is set), when the first request arrived, how much arrived from
// then until end, and by how much the requests' delays from their slots
// to their arrival differed at most.
func (u *upstream) check(end time.Time, tokens bool) (most int, first time.Time, inRun int, spread time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	a := slices.SortedFunc(slices.Values(u.arrived), func(x, y arrival) int { return x.at.Compare(y.at) })
	weight := func(x arrival) int {
		if tokens {
			return x.tokens
		}
		return 1
	}
	// Every window that starts at an arrival: the others hold no more.
	sum, j := 0, 0
	for i := range a {
		for j < len(a) && a[j].at.Sub(a[i].at) < time.Minute {
			sum += weight(a[j])
			j++
		}
		most = max(most, sum)
		sum -= weight(a[i])
	}
	if len(a) == 0 {
		return 0, first, 0, 0
	}
	first = a[0].at
	least, longest := a[0].at.Sub(a[0].late), a[0].at.Sub(a[0].early)
	for _, x := range a {
		if x.at.Before(end) {
			inRun += weight(x)
		}
		least, longest = min(least, x.at.Sub(x.late)), max(longest, x.at.Sub(x.early))
	}
	return most, first, inRun, longest - least
}

// slotKey is the context key of a call's slot, from the child's sender
// through ratelimit.Transport to the Limiter's clock and the base
// transport.
type slotKey struct{}

// slot is what a sender knows of when the Limiter let its call go: the
// Redis server decided between asked and answered, on the same clock as
// this process's, and the slot is then plus the delay.
type slot struct {
	asked, answered time.Time
	delay           time.Duration
}

// slotClock is the Limiter's clock in a child: it sleeps as the system's
// does, and notes on the call's slot when its decision came back, and
// the delay.
type slotClock struct{}

func (slotClock) Now() time.Time { return time.Now() }

func (slotClock) Sleep(ctx context.Context, d time.Duration) error {
	if s, ok := ctx.Value(slotKey{}).(*slot); ok {
		s.answered, s.delay = time.Now(), d
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stamped sends a request with its slot, as a range of Unix nanoseconds,
// in the header X-Slot.
type stamped struct{}

func (stamped) RoundTrip(r *http.Request) (*http.Response, error) {
	s := r.Context().Value(slotKey{}).(*slot)
	if s.answered.IsZero() {
		s.answered = time.Now() // no delay: the decision came back before this
	}
	r = r.Clone(r.Context())
	r.Header.Set("X-Slot", fmt.Sprint(s.asked.Add(s.delay).UnixNano(), s.answered.Add(s.delay).UnixNano()))
	return http.DefaultTransport.RoundTrip(r)
}

// paceChild is a child: its senders send requests to the upstream through
// ratelimit.Transport with a Limiter on the shared Redis until the run's
// end. Args: redis, prefix, upstream, rpm, tpm, burst, seed, child.
func paceChild(args []string) error {
	ns, _ := strconv.ParseInt(os.Getenv("REBOUND_START_AT"), 10, 64)
	start := time.Unix(0, ns) // the signal, which every child shares
	fmt.Println("start", ns)
	// The tests' patience: under the race detector, four processes on a
	// shared machine answer slower than the default 5 ms, and a decision
	// made locally would be one process's alone.
	cfg, err := open(childArg(args, "redis"))
	if err != nil {
		return err
	}
	cfg.Prefix = childArg(args, "prefix")
	var away atomic.Int64
	cfg.OnChange = func(up bool, err error) {
		if !up {
			away.Add(1)
		}
	}
	s, err := New(cfg)
	if err != nil {
		return err
	}
	number := func(name string) float64 {
		f, _ := strconv.ParseFloat(childArg(args, name), 64)
		return f
	}
	burst := int(number("burst"))
	l := NewLimiter(s, "upstream", ratelimit.Config{
		RequestsPerMinute: number("rpm"), TokensPerMinute: number("tpm"), TokenBurst: burst, Clock: slotClock{},
	})
	client := &http.Client{Transport: &ratelimit.Transport{
		Base:    stamped{},
		Limiter: l,
		Tokens: func(r *http.Request) int {
			n, _ := strconv.Atoi(r.Header.Get("X-Tokens"))
			return n
		},
	}}
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(sharedRun))
	defer cancel()
	seed := uint64(number("seed"))*100 + uint64(number("child"))*10
	var sent atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, sharedSenders)
	for g := range uint64(sharedSenders) {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed+g, 0))
			for {
				sl := &slot{asked: time.Now()}
				req, _ := http.NewRequestWithContext(context.WithValue(ctx, slotKey{}, sl), http.MethodPost, childArg(args, "upstream"), nil)
				req.Header.Set("X-Tokens", strconv.Itoa(1+r.IntN(max(burst, 1))))
				resp, err := client.Do(req)
				if errors.Is(err, ratelimit.ErrDeadline) || ctx.Err() != nil {
					return // the next slot is past the run's end
				}
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	close(errs)
	fmt.Println("sent", sent.Load(), "away", away.Load())
	return <-errs
}

// runShared runs the children against an upstream and checks what it saw.
func runShared(t *testing.T, rpm, tpm float64, burst int, seed uint64) {
	s := testStore(t)
	u := newUpstream(t)
	out := runChildren(t, sharedProcesses, "pace", sharedRun+time.Minute,
		"redis="+redisURL(), "prefix="+s.prefix, "upstream="+u.URL,
		"rpm="+strconv.FormatFloat(rpm, 'f', -1, 64), "tpm="+strconv.FormatFloat(tpm, 'f', -1, 64),
		"burst="+strconv.Itoa(burst), "seed="+strconv.FormatUint(seed, 10))
	var start time.Time
	for i, lines := range out {
		if len(lines) < 2 {
			t.Fatalf("child %d said %q", i, lines)
		}
		ns, _ := strconv.ParseInt(lines[0][len("start "):], 10, 64)
		start = time.Unix(0, ns)
		t.Logf("child %d: %s", i, lines[1])
	}
	limits := NewLimiter(s, "", ratelimit.Config{RequestsPerMinute: rpm, TokensPerMinute: tpm, TokenBurst: burst})
	limit, what, pace := rpm, "requests", limits.requests
	if tpm > 0 {
		limit, what, pace = tpm, "tokens", limits.tokens
	}
	// The share is of what the limit allows from the first arrival to the
	// run's end: children that a busy machine starts late send nothing
	// before they run, which says nothing of the Limiter.
	end := start.Add(sharedRun)
	most, first, inRun, spread := u.check(end, tpm > 0)
	allowed := limit * end.Sub(first).Minutes()
	share := float64(inRun) / allowed
	beyond := max(spread-arrivalMargin, 0)
	bound := limit + math.Ceil(pace.Rate*beyond.Seconds())
	t.Logf("%s: at most %d in a 60 s window (limit %.0f); the delays from slot to arrival differed by up to %v; the first arrived %v after the signal; %d from then to the run's end, %.2f%% of the %.0f allowed in that time",
		what, most, limit, spread.Round(time.Millisecond), first.Sub(start).Round(time.Millisecond), inRun, 100*share, allowed)
	if float64(most) > bound {
		t.Errorf("a 60 s window at the upstream saw %d %s; the limit is %.0f, and %.0f with what the pace adds in the %v by which the delays differed beyond the margin", most, what, limit, bound, beyond)
	}
	if share < 0.97 {
		t.Errorf("the run saw %.2f%% of the %s allowed, want at least 97%%", 100*share, what)
	}
}

func TestSharedRequestsLimit(t *testing.T) {
	t.Parallel()
	runShared(t, 600, 0, 0, 1)
}

// TestSharedTokensLimit: calls of 1 to 1000 tokens (seeded), against
// 120 000 tokens a minute in bursts of at most 1000: the burst is the
// largest call, so that the pace, 119 000 per 60.5 s, keeps 98% of the
// limit (with the default burst of ten seconds' worth, two minutes could
// see no more than 92% of twice the limit; see
// ratelimit.Config.TokenBurst).
func TestSharedTokensLimit(t *testing.T) {
	t.Parallel()
	const seed = 1
	t.Logf("seed %d", seed)
	runShared(t, 0, 120000, 1000, seed)
}
