package reboundredis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/tool"
)

// The fleet: fleetProcesses processes make fleetCalls tool calls each,
// drawn from fleetIDs calls, so that each call is made about 10 times
// across the fleet, often at the same moment.
const (
	fleetProcesses = 4
	fleetCalls     = 1000
	fleetIDs       = 400
	fleetWorkers   = 16
	fleetSeed      = 13
	// fleetAttempt bounds an attempt of a tool call. A lost reply that is
	// late comes after fleetLate, which the attempt cuts short: a reply
	// that is merely slow, as on a machine other test runs keep busy
	// (under the race detector, 64 workers in 4 processes), must not pass
	// for a lost one, or calls end of unknown outcome that did not.
	fleetAttempt = 2 * time.Second
	fleetLate    = time.Minute
)

// callIDHeader tells the upstream which call a request belongs to, so
// that the test can count the actions each call caused.
const callIDHeader = "X-Test-Call-ID"

// fleetDraws returns the calls a child makes, in order.
func fleetDraws(child int) []int {
	rng := rand.New(rand.NewPCG(fleetSeed, uint64(child)))
	d := make([]int, fleetCalls)
	for i := range d {
		d[i] = rng.IntN(fleetIDs)
	}
	return d
}

// fleetCounts is how a child's calls ended.
type fleetCounts struct {
	Ran             int // made here, and answered
	RanUnknown      int // made here, and ended without saying whether they took effect
	Recorded        int // answered from the record of a run elsewhere or earlier
	RecordedUnknown int // answered from the record of a run whose outcome is unknown
	InProgress      int // the same call was running elsewhere past the wait
	Other           int
	PriorRunUnknown int // made after a holder's lease ran out
	RedisAway       int // times the child's store heard Redis go away
}

func (c *fleetCounts) add(o fleetCounts) {
	c.Ran += o.Ran
	c.RanUnknown += o.RanUnknown
	c.Recorded += o.Recorded
	c.RecordedUnknown += o.RecordedUnknown
	c.InProgress += o.InProgress
	c.Other += o.Other
	c.PriorRunUnknown += o.PriorRunUnknown
	c.RedisAway += o.RedisAway
}

func (c *fleetCounts) count(res tool.Result) {
	if res.PriorRunUnknown {
		c.PriorRunUnknown++
	}
	f := res.Failure
	switch {
	case res.Recorded && f == nil:
		c.Recorded++
	case res.Recorded && f.MayHaveTakenEffect:
		c.RecordedUnknown++
	case errors.Is(res.Err, tool.ErrInProgress):
		c.InProgress++
	case f == nil:
		c.Ran++
	case f.MayHaveTakenEffect:
		c.RanUnknown++
	default:
		c.Other++
		fmt.Fprintln(os.Stderr, "unexpected failure:", f)
	}
}

func init() { children["records"] = recordsChild }

// recordsChild makes its fleetCalls calls to the tool "act", which POSTs
// to the upstream at url=, sharing records on redis= under prefix=. With
// kind=idempotent the tool sends its idempotency key and is retried;
// with kind=side-effect it sends none and is attempted once. It prints its
// fleetCounts as JSON.
func recordsChild(args []string) error {
	// The tests' patience: the test shows what shared records guarantee
	// while Redis answers; a decision it did not answer in time would be
	// local.
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
	store, err := New(cfg)
	if err != nil {
		return err
	}
	defer cfg.Client.Close()
	records, err := NewRecords(store, RecordsConfig{})
	if err != nil {
		return err
	}
	spec := tool.Spec{Kind: tool.SideEffects, Policy: rebound.Policy{AttemptTimeout: fleetAttempt}}
	if childArg(args, "kind") == "idempotent" {
		spec = tool.Spec{Kind: tool.Idempotent, Policy: rebound.Policy{
			MaxAttempts: 30, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, AttemptTimeout: fleetAttempt,
		}}
	}
	transport := &http.Transport{MaxIdleConnsPerHost: fleetWorkers}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	url := childArg(args, "url")
	tools := &tool.Registry{Records: records}
	tools.Register("act", spec, func(ctx context.Context, c tool.Call) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(c.Arguments))
		if err != nil {
			return "", rebound.Permanent(err)
		}
		req.Header.Set(callIDHeader, c.ID)
		if key := tool.IdempotencyKey(ctx); key != "" {
			req.Header.Set(chaos.HeaderIdempotencyKey, key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return "", err
		}
		if resp.StatusCode != http.StatusOK {
			return "", &rebound.HTTPError{StatusCode: resp.StatusCode, Body: body}
		}
		return string(body), nil
	})

	child, _ := strconv.Atoi(childArg(args, "child"))
	next := make(chan int)
	var mu sync.Mutex
	var total fleetCounts
	var wg sync.WaitGroup
	for range fleetWorkers {
		wg.Go(func() {
			var mine fleetCounts
			for n := range next {
				mine.count(tools.Execute(context.Background(), tool.Call{
					ID: fmt.Sprintf("call_%d", n), Name: "act", Arguments: fmt.Appendf(nil, `{"n":%d}`, n),
				}))
			}
			mu.Lock()
			defer mu.Unlock()
			total.add(mine)
		})
	}
	for _, n := range fleetDraws(child) {
		next <- n
	}
	close(next)
	wg.Wait()
	total.RedisAway = int(away.Load())
	return json.NewEncoder(os.Stdout).Encode(total)
}

// TestRecordsAcrossProcesses: 4 processes make 1 000 tool calls each,
// drawn from 400 calls, against an upstream that performs an action for
// each request and loses 20% of the replies (after the action, or by a
// dropped connection). No call's action is performed twice.
//
// With a side-effecting tool and an upstream that keeps no record of its
// own, the shared records alone stand between a call and its repeats:
// each call is made by one process, once, and every other process answers
// from its record; a call whose reply was lost is recorded as of unknown
// outcome and is never made again, by any process. With an idempotent
// tool, whose upstream answers a repeated key from its record, every call
// succeeds, and the shared records keep the repeats from reaching the
// upstream at all.
func TestRecordsAcrossProcesses(t *testing.T) {
	distinct := map[int]bool{}
	for child := range fleetProcesses {
		for _, n := range fleetDraws(child) {
			distinct[n] = true
		}
	}
	for _, kind := range []string{"side-effect", "idempotent"} {
		t.Run(kind, func(t *testing.T) {
			cfg := testConfig(t, redisURL())
			upstream, err := chaos.New(chaos.Config{Mode: chaos.ModeLostReply, FailRate: 0.2, Seed: fleetSeed, SlowDelay: fleetLate})
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			requests := map[string]int{} // by call ID
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				requests[r.Header.Get(callIDHeader)]++
				mu.Unlock()
				upstream.ServeHTTP(w, r)
			}))
			defer ts.Close()

			start := time.Now()
			out := runChildren(t, fleetProcesses, "records", 3*time.Minute,
				"url="+ts.URL, "redis="+redisURL(), "prefix="+cfg.Prefix, "kind="+kind)
			elapsed := time.Since(start) - time.Second // the children start a second after they are launched
			var sum fleetCounts
			for i, lines := range out {
				var c fleetCounts
				if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &c) != nil {
					t.Fatalf("child %d printed %q", i, lines)
				}
				sum.add(c)
			}
			st := upstream.Stats()
			mu.Lock()
			defer mu.Unlock()
			repeated := 0 // requests for a call beyond its first
			for _, n := range requests {
				repeated += n - 1
			}
			t.Logf("%v: %d calls (%d distinct): %d made and answered, %d made with the outcome unknown; "+
				"%d answered from a record of success, %d from a record of an unknown outcome; %d in progress, %d other, %d after a dead holder; "+
				"upstream: %d requests, %d actions, %d answered from its own record; requests beyond a call's first: %d; Redis went away %d times",
				elapsed.Round(time.Millisecond), fleetProcesses*fleetCalls, len(distinct), sum.Ran, sum.RanUnknown,
				sum.Recorded, sum.RecordedUnknown, sum.InProgress, sum.Other, sum.PriorRunUnknown,
				st.Requests, st.Actions, st.Duplicates, repeated, sum.RedisAway)

			calls := sum.Ran + sum.RanUnknown + sum.Recorded + sum.RecordedUnknown + sum.InProgress + sum.Other
			if calls != fleetProcesses*fleetCalls || sum.Other != 0 || sum.InProgress != 0 || sum.PriorRunUnknown != 0 || sum.RedisAway != 0 {
				t.Fatalf("%+v", sum)
			}
			// Each call was made by one process, once; every other time it
			// was answered from its record.
			if sum.Ran+sum.RanUnknown != len(distinct) {
				t.Errorf("%d runs of %d distinct calls", sum.Ran+sum.RanUnknown, len(distinct))
			}
			switch kind {
			case "side-effect":
				// Every request performs an action: one per call at most.
				if repeated != 0 || st.Actions != st.Requests || st.Requests > len(distinct) || st.Actions < sum.Ran {
					t.Errorf("%d duplicate actions; %d actions for %d calls answered", repeated, st.Actions, sum.Ran)
				}
				if sum.RanUnknown == 0 || sum.RecordedUnknown == 0 {
					t.Error("no reply was lost: the test tested nothing")
				}
			case "idempotent":
				// The upstream performs a key's action once: every call's
				// action, once, and the retries after lost replies answered
				// from its record.
				if sum.RanUnknown != 0 || sum.RecordedUnknown != 0 || st.Actions != len(distinct) || st.Duplicates == 0 {
					t.Errorf("%d actions for %d calls; %+v", st.Actions, len(distinct), sum)
				}
			}
		})
	}
}
