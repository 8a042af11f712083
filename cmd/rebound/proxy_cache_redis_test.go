package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestProxyCacheSharedOnRedis: two proxies on one Redis share a route's
// cached answers. While the upstream answers, the first sends every
// request to it and keeps the answers, under --redis-prefix, each key
// expiring at the route's max_stale; once the upstream is down, the
// second, which never asked for them, serves them in place of its 503s,
// marked stale, byte for byte, plain and streamed; a request never
// answered still gets the upstream's 503.
func TestProxyCacheSharedOnRedis(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	const plain = "{\"id\":\"c1\",\"choices\":[{\"message\":{\"content\":\"h\u00e9llo \\r\\n \u2603\"}}]}"
	var up *fakeUpstream
	up = newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if down.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"error":{"message":"overloaded"}}`)
			return
		}
		if _, body := up.lastRequest(); strings.Contains(body, `"stream":true`) {
			streamEvents(w, sseEvents)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, plain)
	})
	config := filepath.Join(t.TempDir(), "proxy.json")
	os.WriteFile(config, []byte(`{"upstreams":{"u":{"url":"`+up.URL+`"}},
		"routes":[{"name":"chat","upstream":"u","cache":{"serve":"on_failure","max_stale":"2h"}}],
		"policy":{"max_attempts":1}}`), 0o600)
	prefix := fmt.Sprintf("rebound-test-cache-%d:", time.Now().UnixNano())
	const redisURL = "redis://127.0.0.1:6379/0?protocol=2"
	t.Cleanup(func() { deleteKeys(t, redisURL, prefix) })
	args := []string{"--config", config, "--redis", redisURL, "--redis-timeout", sharedDecision, "--redis-prefix", prefix}
	first, firstLogs, stopFirst := startProxy(t, args...)
	second, secondLogs, _ := startProxy(t, args...)

	const streamed = `{"model":"gpt-x","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	asks := []struct{ body, answer string }{{chatBody, plain}, {streamed, strings.Join(sseEvents, "")}}
	for _, a := range asks {
		resp, body := post(t, first+"/v1/chat/completions", a.body)
		if resp.StatusCode != 200 || body != a.answer || resp.Header.Get("X-Rebound-Cache") != "" {
			t.Fatalf("the first proxy, the upstream up: %d %q %q; want the upstream's answer", resp.StatusCode, resp.Header.Get("X-Rebound-Cache"), body)
		}
	}
	// Stopped, the first proxy has finished its requests: their answers
	// were read whole, and kept.
	stopFirst()
	if n := strings.Count(firstLogs.String(), `"cache":"stored"`); n != 2 {
		t.Fatalf("the first proxy's access log says %d answers stored, want 2:\n%s", n, firstLogs)
	}
	keysOnRedis(t, redisURL, prefix, 2*time.Hour)

	down.Store(true)
	for _, a := range asks {
		resp, body := post(t, second+"/v1/chat/completions", a.body)
		if resp.StatusCode != 200 || body != a.answer || resp.Header.Get("X-Rebound-Cache") != "stale" {
			t.Errorf("the second proxy, the upstream down: %d %q %q; want the first's answer, stale", resp.StatusCode, resp.Header.Get("X-Rebound-Cache"), body)
		}
		if age, err := strconv.Atoi(resp.Header.Get("Age")); err != nil || age < 0 {
			t.Errorf("Age %q, want the seconds since the answer was kept", resp.Header.Get("Age"))
		}
	}
	if resp, _ := post(t, second+"/v1/chat/completions", `{"model":"gpt-x","messages":[{"role":"user","content":"never asked"}]}`); resp.StatusCode != 503 {
		t.Errorf("a request never answered, the upstream down: %d, want its 503", resp.StatusCode)
	}
	if n := strings.Count(secondLogs.String(), `"cache":"stale"`); n != 2 {
		t.Errorf("the second proxy's access log says %d answers stale, want 2:\n%s", n, secondLogs)
	}
	// Through OpenTelemetry's exporter, as every series of /metrics.
	_, metrics := get(t, second+"/metrics")
	if n := metricLine(t, metrics, `rebound_proxy_cache_stale_total{route="chat"}`); n != 2 {
		t.Errorf("the second proxy's /metrics says %v answers stale, want 2", n)
	}
	if n := up.hits.Load(); n != 5 {
		t.Errorf("the upstream had %d requests, want 5: on_failure sends every request", n)
	}
}

// keysOnRedis fails the test unless the cached answers on the Redis at
// url are two keys under prefix, each expiring within keep.
func keysOnRedis(t *testing.T, url, prefix string, keep time.Duration) {
	t.Helper()
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := c.Keys(ctx, prefix+"cache:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("cached answers on Redis: %d keys under %scache:, %v; want 2", len(keys), prefix, err)
	}
	for _, k := range keys {
		if left := c.PTTL(ctx, k).Val(); left > keep || left < keep-time.Minute {
			t.Errorf("a cached answer expires in %v, want %v (max_stale)", left, keep)
		}
	}
}
