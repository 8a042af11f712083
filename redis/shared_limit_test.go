package reboundredis

import (
	"context"
	"errors"
	"fmt"
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
// upstream in this process, which notes when each request arrives. No 60
// s window there may see more than the limit, and the 120 s must see at
// least 97% of twice the limit. The two tests run in parallel, so that
// the suite pays their 120 s once.
const (
	sharedRun       = 120 * time.Second
	sharedProcesses = 4
	sharedSenders   = 8 // goroutines per process, each with a call waiting
)

func init() { children["pace"] = paceChild }

// arrival is one request at the upstream.
type arrival struct {
	at     time.Time
	tokens int
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
		u.mu.Lock()
		u.arrived = append(u.arrived, arrival{now, tokens})
		u.mu.Unlock()
		w.Write([]byte("{}"))
	}))
	t.Cleanup(u.Close)
	return u
}

// check reports the most any 60 s window saw (requests, or tokens when
// tokens is set), and how much arrived in the run's 120 s from start.
func (u *upstream) check(start time.Time, tokens bool) (most, inRun int) {
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
	for _, x := range a {
		if !x.at.Before(start) && x.at.Before(start.Add(sharedRun)) {
			inRun += weight(x)
		}
	}
	return most, inRun
}

// paceChild is a child: its senders send requests to the upstream through
// ratelimit.Transport with a Limiter on the shared Redis until the run's
// end. Args: redis, prefix, upstream, rpm, tpm, burst, seed, child.
func paceChild(args []string) error {
	ns, _ := strconv.ParseInt(os.Getenv("REBOUND_START_AT"), 10, 64)
	start := time.Unix(0, ns) // the signal, which every child shares
	fmt.Println("start", ns)
	cfg, err := Open(childArg(args, "redis"))
	if err != nil {
		return err
	}
	cfg.Prefix = childArg(args, "prefix")
	// Under the race detector, four processes on a shared machine answer
	// slower than the default 5 ms; a decision made locally would be one
	// process's alone.
	cfg.Timeout = 250 * time.Millisecond
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
		RequestsPerMinute: number("rpm"), TokensPerMinute: number("tpm"), TokenBurst: burst,
	})
	client := &http.Client{Transport: &ratelimit.Transport{
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
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, childArg(args, "upstream"), nil)
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
	limit, what := rpm, "requests"
	if tpm > 0 {
		limit, what = tpm, "tokens"
	}
	most, inRun := u.check(start, tpm > 0)
	share := float64(inRun) / (2 * limit)
	t.Logf("%s: at most %d in a 60 s window (limit %.0f); %d in the %v run, %.2f%% of the %.0f allowed",
		what, most, limit, inRun, sharedRun, 100*share, 2*limit)
	if float64(most) > limit {
		t.Errorf("a 60 s window at the upstream saw %d %s; the limit is %.0f", most, what, limit)
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
