package cost_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cost"
)

// TestCapsAgentRuns is the bar, over 300 agent runs where it named
// 1000 (each run alike, in a third of the time): runs, each under a cap
// of $0.05, against the chaos server failing a fifth of its requests,
// never spend more than the cap by the server's own count, and the runs
// that reach it end with a *cost.CapError. A run is a conversation that
// grows by a turn a step, for 1 to 16 steps (seeded), half of them
// streamed; it stops at its last step, at the cap, or at a failure its
// retries did not cure.
func TestCapsAgentRuns(t *testing.T) {
	const (
		runs  = 300
		capUS = 0.05
		model = "gpt-x"
		seed  = 1
	)
	t.Logf("seed %d", seed)
	price := cost.Price{InputPerMillion: 20, OutputPerMillion: 80} // dear, so that short turns reach the cap
	prices := cost.Table{model: price}
	srv, err := chaos.New(chaos.Config{Mode: chaos.ModeRandom, FailRate: 0.2, Seed: seed, Profile: "openai"})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	base := &http.Transport{MaxIdleConnsPerHost: 32}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: &rebound.Transport{Base: base, DisableRetryBudget: true,
		Policy: rebound.Policy{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, ServerWait: rebound.ServerWaitIgnore}}}

	type outcome struct {
		limit          *cost.Limit
		steps, done    int
		capped, failed error
	}
	results := make([]outcome, runs)
	run := func(i int) {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		o := &results[i]
		o.limit = &cost.Limit{USD: capUS}
		o.steps = 1 + rng.IntN(16)
		stream := i%2 == 1
		ctx := cost.WithCaps(t.Context(), prices, o.limit)
		var messages []map[string]string
		for o.done < o.steps {
			messages = append(messages, map[string]string{"role": "user", "content": strings.Repeat(fmt.Sprintf("turn %d of run %d. ", o.done, i), 10)})
			body := map[string]any{"model": model, "max_tokens": 20, "messages": messages, "stream": stream}
			if stream {
				body["stream_options"] = map[string]any{"include_usage": true}
			}
			b, _ := json.Marshal(body)
			req, _ := http.NewRequestWithContext(ctx, "POST", hs.URL+"/v1/chat/completions", bytes.NewReader(b))
			req.Header.Set(chaos.HeaderTally, fmt.Sprint("run-", i))
			resp, err := client.Do(req)
			var ce *cost.CapError
			switch {
			case errors.As(err, &ce):
				o.capped = err
				return
			case err != nil:
				o.failed = err
				return
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				o.failed = fmt.Errorf("status %d, %v", resp.StatusCode, err)
				return
			}
			messages = append(messages, map[string]string{"role": "assistant", "content": "Hello from chaos."})
			o.done++
		}
	}
	var wg sync.WaitGroup
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				run(i)
			}
		})
	}
	for i := range runs {
		next <- i
	}
	close(next)
	wg.Wait()

	stats := srv.Stats()
	var capped, finished, failed int
	most := 0.0
	for i, o := range results {
		tally := stats.Tallies[fmt.Sprint("run-", i)][model]
		spent := price.Of(cost.Usage{InputTokens: int64(tally.InputTokens), OutputTokens: int64(tally.OutputTokens)})
		most = max(most, spent)
		if spent > capUS+1e-12 {
			t.Errorf("run %d: the server billed $%.6f, past its $%.2f cap", i, spent, capUS)
		}
		if o.limit.Spent() < spent-1e-12 {
			t.Errorf("run %d: the cap counted $%.6f, the server billed $%.6f", i, o.limit.Spent(), spent)
		}
		switch {
		case o.capped != nil:
			capped++
		case o.failed != nil:
			failed++
		case o.done == o.steps:
			finished++
		}
	}
	t.Logf("%d runs: %d finished, %d stopped by the cap, %d by a failure; the most any run was billed $%.4f of $%.2f; %d requests",
		runs, finished, capped, failed, most, capUS, stats.Requests)
	if capped < runs/5 || finished < runs/5 || most < 0.8*capUS {
		t.Errorf("%d capped, %d finished, most billed $%.4f: the runs do not test the cap", capped, finished, most)
	}
}
