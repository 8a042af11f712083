package tool_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/internal/memnet"
	"github.com/rebound-go/rebound/tool"
)

// sendTool is a side-effecting tool over HTTP: it POSTs to url and passes
// on the guard's idempotency key, if there is one.
func sendTool(client *http.Client, url string) tool.Func {
	return func(ctx context.Context, c tool.Call) (string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(c.Arguments))
		if err != nil {
			return "", rebound.Permanent(err)
		}
		req.Header.Set(chaos.HeaderMode, chaos.ModeLostReply)
		if key := tool.IdempotencyKey(ctx); key != "" {
			req.Header.Set("Idempotency-Key", key)
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
	}
}

// TestLostRepliesNeverDuplicate sends 2 500 side-effecting tool calls to
// a server that performs each action and then loses 35% of the replies
// (a dropped connection, or an answer after the client's 100 ms timeout).
// Attempted once, no call is performed twice; with idempotency keys and
// retries, every call succeeds and is performed exactly once. It runs in
// virtual time, net/http's client and server over an in-memory network,
// so that the 100 ms timeout is the server's lateness alone, never a busy
// machine's.
func TestLostRepliesNeverDuplicate(t *testing.T) {
	const calls, workers = 2500, 64
	for _, tc := range []struct {
		name string
		spec tool.Spec
	}{
		{"SideEffectOnce", tool.Spec{Kind: tool.SideEffects, Policy: rebound.Policy{AttemptTimeout: 100 * time.Millisecond}}},
		{"IdempotentWithRetries", tool.Spec{Kind: tool.Idempotent, Policy: rebound.Policy{
			MaxAttempts: 30, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, AttemptTimeout: 100 * time.Millisecond,
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, err := chaos.New(chaos.Config{Seed: 5, FailRate: 0.35, SlowDelay: 300 * time.Millisecond})
				if err != nil {
					t.Fatal(err)
				}
				transport, stop := memnet.Serve(srv)
				defer stop()
				var tools tool.Registry
				tools.Register("send", tc.spec, sendTool(&http.Client{Transport: transport}, "http://chaos"))

				start := time.Now()
				var ok, doubtful atomic.Int64
				next := make(chan int)
				var wg sync.WaitGroup
				for range workers {
					wg.Go(func() {
						for i := range next {
							res := tools.Execute(context.Background(), tool.Call{ID: fmt.Sprintf("call_%d", i), Name: "send", Arguments: []byte(fmt.Sprintf(`{"n":%d}`, i))})
							switch {
							case res.Failure == nil:
								ok.Add(1)
							case res.Failure.MayHaveTakenEffect:
								doubtful.Add(1)
							default:
								t.Errorf("call %d: %s", i, res.Failure)
							}
						}
					})
				}
				for i := range calls {
					next <- i
				}
				close(next)
				wg.Wait()
				st := srv.Stats()
				t.Logf("%v: %d answered, %d may have taken effect; server: %d requests, %d actions, %d duplicates",
					time.Since(start).Round(time.Millisecond), ok.Load(), doubtful.Load(), st.Requests, st.Actions, st.Duplicates)
				switch tc.spec.Kind {
				case tool.SideEffects:
					// One request per call, each a distinct action.
					if st.Duplicates != 0 || st.Actions != st.Requests || st.Requests != calls ||
						ok.Load()+doubtful.Load() != calls || ok.Load() > int64(st.Actions) || doubtful.Load() == 0 {
						t.Fatalf("%d requests, %d actions, %d duplicates; %d answered, %d doubtful", st.Requests, st.Actions, st.Duplicates, ok.Load(), doubtful.Load())
					}
				case tool.Idempotent:
					if st.Actions != calls || ok.Load() != calls || st.Duplicates == 0 || st.Requests != st.Actions+st.Duplicates {
						t.Fatalf("%d of %d answered; %d requests, %d duplicates", ok.Load(), calls, st.Requests, st.Duplicates)
					}
				}
			})
		})
	}
}
