package reboundredis_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rebound-go/rebound/cache"
	reboundredis "github.com/rebound-go/rebound/redis"
	"github.com/redis/go-redis/v9"
)

// Two replicas of a service keep their answers on one Redis: an answer
// one replica got while the provider answered, the other serves, marked
// stale, once the provider is down.
func ExampleNewCache() {
	// Keys of this example only, removed when it ends.
	prefix := fmt.Sprintf("rebound-example-cache:%d:%d:", os.Getpid(), time.Now().UnixNano())
	var clients []redis.UniversalClient
	defer func() {
		removeKeys(clients[0], prefix) // and closes it
		clients[1].Close()
	}()
	replica := func() *cache.Cache {
		cfg, err := reboundredis.Open("redis://127.0.0.1:6379/0")
		if err != nil {
			log.Fatal(err)
		}
		clients = append(clients, cfg.Client)
		cfg.Prefix = prefix
		cfg.Timeout = 2 * time.Second // for a busy machine
		store, err := reboundredis.New(cfg)
		if err != nil {
			log.Fatal(err)
		}
		answers, err := reboundredis.NewCache(store, reboundredis.CacheConfig{})
		if err != nil {
			log.Fatal(err)
		}
		c, err := cache.New(cache.Config{Serve: cache.OnFailure}, answers)
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	first, second := replica(), replica()

	provider := func(status int, body string) func(*http.Request) (*http.Response, error) {
		return func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body))}, nil
		}
	}
	ask := func(c *cache.Cache, next func(*http.Request) (*http.Response, error)) {
		body := []byte(`{"model":"gpt-x","messages":[{"role":"user","content":"Hello?"}]}`)
		req, _ := http.NewRequest(http.MethodPost, "https://api.openai.com/v1/chat/completions", strings.NewReader(string(body)))
		req = req.WithContext(cache.With(context.Background(), cache.Scope{Tenant: "acme", Route: "chat"}, nil))
		resp, err := c.Exchange(req, body, next)
		if err != nil {
			log.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body) // read whole: kept
		resp.Body.Close()
		fmt.Printf("%d %q %s\n", resp.StatusCode, resp.Header.Get(cache.Header), answer)
	}
	ask(first, provider(http.StatusOK, `{"content":"Hi!"}`))
	ask(second, provider(http.StatusServiceUnavailable, `{"error":"overloaded"}`))
	// Output:
	// 200 "" {"content":"Hi!"}
	// 200 "stale" {"content":"Hi!"}
}
