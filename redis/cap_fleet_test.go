package reboundredis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cost"
)

// The bar: 4 processes sharing a daily cap through Redis never
// pass it together, counted by the chaos server; with Redis killed
// mid-run, spend stays within the cap.

const (
	capProcesses = 4
	capSenders   = 2 // goroutines per process
	fleetCapUSD  = 0.5
)

// fleetPrices price the fleet's model: a request may cost about $0.023
// (its body's bytes / 4 in, 50 out), and costs about $0.003 (the chaos
// server's "Hello from chaos.", 5 tokens out).
var fleetPrices = cost.Table{"m": {InputPerMillion: 100, OutputPerMillion: 400}}

const fleetBody = `{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"Say hello to the fleet, briefly please."}]}`

func init() { children["spend"] = spendChild }

// tallied is what the chaos server billed, priced by fleetPrices.
func tallied(st chaos.Stats) float64 {
	usd := 0.0
	for _, models := range st.Tallies {
		for model, t := range models {
			usd += fleetPrices[model].Of(cost.Usage{InputTokens: int64(t.InputTokens), OutputTokens: int64(t.OutputTokens)})
		}
	}
	return usd
}

// spendChild is a child: its senders send requests to the chaos server
// through rebound.Transport under the shared cap until the cap refuses
// one. Args: redis, prefix, chaos, child.
func spendChild(args []string) error {
	cfg, err := open(childArg(args, "redis")) // the tests' patience: Redis is away only once killed
	if err != nil {
		return err
	}
	cfg.Prefix = childArg(args, "prefix")
	cfg.RetryEvery = 100 * time.Millisecond
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
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	limit := s.Cap("tenant", CapConfig{USD: fleetCapUSD, Replicas: capProcesses})
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{
		MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond,
	}}}
	ctx = cost.WithCaps(ctx, fleetPrices, limit)
	var sent, refused atomic.Int64
	errs := make(chan error, capSenders)
	var wg sync.WaitGroup
	for range capSenders {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, childArg(args, "chaos")+"/v1/chat/completions", strings.NewReader(fleetBody))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(chaos.HeaderTally, "child-"+childArg(args, "child"))
				resp, err := client.Do(req)
				var ce *cost.CapError
				if errors.As(err, &ce) {
					refused.Add(1)
					return
				}
				if err != nil {
					continue // the chaos server's failures, retried and given up
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				sent.Add(1)
			}
			errs <- errors.New("never refused before the deadline")
		})
	}
	wg.Wait()
	close(errs)
	fmt.Println("answered", sent.Load(), "refused", refused.Load(), "away", away.Load())
	return <-errs
}

// runFleet runs the children against a chaos server that fails a fifth
// of requests, on a redis-server of the test's own that is killed once
// the server has billed killAt of the cap (never, for killAt > 1). It
// returns the spend the server tallied.
func runFleet(t *testing.T, killAt float64) float64 {
	srv := startRedis(t)
	cfg := testConfig(t, srv.URL())
	ch, err := chaos.New(chaos.Config{Mode: chaos.ModeRandom, FailRate: 0.2, Seed: 1, Profile: chaos.ProfileOpenAI})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("chaos seed 1")
	reached := make(chan struct{})
	var once sync.Once
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ch.ServeHTTP(w, r)
		if tallied(ch.Stats()) >= killAt*fleetCapUSD {
			once.Do(func() { close(reached) })
		}
	}))
	defer upstream.Close()
	stop, finished := make(chan struct{}), make(chan struct{})
	var killedAt float64
	go func() {
		defer close(finished)
		select {
		case <-reached:
			srv.Stop()
			killedAt = tallied(ch.Stats())
		case <-stop:
		}
	}()
	out := runChildren(t, capProcesses, "spend", 60*time.Second,
		"redis="+srv.URL(), "prefix="+cfg.Prefix, "chaos="+upstream.URL)
	close(stop)
	<-finished
	for i, lines := range out {
		t.Logf("child %d: %s", i, strings.Join(lines, "; "))
	}
	st := ch.Stats()
	spent := tallied(st)
	t.Logf("the chaos server billed $%.4f of a $%.2f cap for %d requests (%v)", spent, fleetCapUSD, st.Requests, st.ByStatus)
	if killAt <= 1 {
		t.Logf("Redis was killed at $%.4f billed", killedAt)
	}
	if spent > fleetCapUSD {
		t.Errorf("the fleet spent $%.4f; the cap is $%.2f", spent, fleetCapUSD)
	}
	return spent
}

func TestCapFleet(t *testing.T) {
	spent := runFleet(t, 2)
	if spent < fleetCapUSD/2 {
		t.Errorf("the fleet spent $%.4f of a $%.2f cap; want at least half", spent, fleetCapUSD)
	}
}

func TestCapFleetRedisKilled(t *testing.T) {
	spent := runFleet(t, 0.35)
	if spent <= 0.35*fleetCapUSD {
		t.Errorf("the fleet spent $%.4f, nothing on its local shares", spent)
	}
}
