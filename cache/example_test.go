package cache_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cache"
)

// An agent asks the same question twice; between the two, its provider
// goes down. The second answer is the first, served from the cache once
// the retries are spent, and marked stale, so that the agent can tell.
func Example_outage() {
	var asked atomic.Int32
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) > 1 {
			http.Error(w, `{"error":{"type":"api_error","message":"down"}}`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, `{"content":[{"type":"text","text":"Paris."}]}`)
	}))
	defer provider.Close()

	answers, err := cache.New(cache.Config{}, nil) // cache.OnFailure, in memory
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: &rebound.Transport{
		Cache: answers,
		Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond,
			Observer: rebound.ObserverFunc(func(e rebound.Event) {
				if e.Type == rebound.EventCacheStale {
					fmt.Printf("event: %v after %d attempts\n", e.Type, e.Attempt)
				}
			})},
	}}
	for range 2 {
		resp, err := client.Post(provider.URL+"/v1/messages", "application/json",
			strings.NewReader(`{"model":"claude-x","messages":[{"role":"user","content":"The capital of France?"}]}`))
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body) // read whole: only then is it kept
		resp.Body.Close()
		fmt.Printf("%d %s %s=%q\n", resp.StatusCode, body, cache.Header, resp.Header.Get(cache.Header))
	}
	// Output:
	// 200 {"content":[{"type":"text","text":"Paris."}]} X-Rebound-Cache=""
	// event: cache_stale after 3 attempts
	// 200 {"content":[{"type":"text","text":"Paris."}]} X-Rebound-Cache="stale"
}
