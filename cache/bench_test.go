package cache_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/cache"
)

// conversation is a request body of an agent's turn: a long system prompt
// and n messages, about 1 KiB each.
func conversation(n int) string {
	var b strings.Builder
	b.WriteString(`{"model":"gpt-4o","stream":false,"messages":[{"role":"system","content":"` + strings.Repeat("You are careful. ", 60) + `"}`)
	for i := range n {
		fmt.Fprintf(&b, `,{"role":"user","content":"turn %d: %s"}`, i, strings.Repeat("more words here ", 60))
	}
	b.WriteString(`],"temperature":0.2}`)
	return b.String()
}

// BenchmarkKey is the cost of keying a 20-message conversation (about
// 21 KiB): what a lookup adds before any store is asked.
func BenchmarkKey(b *testing.B) {
	body := []byte(conversation(20))
	req, _ := http.NewRequest(http.MethodPost, "http://x/v1/chat/completions", nil)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := cache.Key(cache.Scope{Tenant: "t", Route: "r"}, req, body); !ok {
			b.Fatal("not cacheable")
		}
	}
}

// BenchmarkExchange is a whole exchange through a Memory: a hit under
// Always (keyed, found, answered), and a miss that keeps its answer.
func BenchmarkExchange(b *testing.B) {
	body := []byte(conversation(20))
	answer := strings.Repeat("x", 2048)
	next := func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			ContentLength: int64(len(answer)), Body: io.NopCloser(strings.NewReader(answer)), Request: req}, nil
	}
	run := func(b *testing.B, c *cache.Cache, vary bool) {
		req, _ := http.NewRequest(http.MethodPost, "http://x/v1/chat/completions", nil)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r := req
			if vary {
				i++
				r = req.WithContext(cache.With(context.Background(), cache.Scope{Tenant: fmt.Sprint(i)}, nil))
			}
			resp, err := c.Exchange(r, body, next)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	b.Run("hit", func(b *testing.B) {
		c, _ := cache.New(cache.Config{Serve: cache.Always, TTL: time.Hour, MaxStale: time.Hour}, nil)
		run(b, c, false)
		if c.Stats().Hits == 0 {
			b.Fatal("no hits")
		}
	})
	b.Run("store", func(b *testing.B) {
		c, _ := cache.New(cache.Config{}, nil)
		run(b, c, true)
		if c.Stats().Stored == 0 {
			b.Fatal("nothing stored")
		}
	})
}

// BenchmarkMemoryBound stores many distinct large answers, 256 KiB each,
// 16 times as many as a 64 MiB store holds, and reports what the heap
// holds afterwards (heap-MiB, after a collection) beside what the store
// counts (store-MiB): the bound holds in memory, not only in its count.
func BenchmarkMemoryBound(b *testing.B) {
	const answer = 256 << 10
	ctx := context.Background()
	b.ReportAllocs()
	var heap, held float64
	for b.Loop() {
		m := cache.NewMemory(cache.DefaultMaxBytes)
		for i := range 16 * cache.DefaultMaxBytes / answer {
			e := cache.Entry{Status: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: make([]byte, answer), Stored: time.Now()}
			if err := m.Put(ctx, fmt.Sprintf("%064d", i), e, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		_, bytes := m.Len()
		heap, held = float64(ms.HeapAlloc)/(1<<20), float64(bytes)/(1<<20)
		if bytes > cache.DefaultMaxBytes {
			b.Fatalf("the store holds %d bytes, past its bound", bytes)
		}
		runtime.KeepAlive(m)
	}
	b.ReportMetric(heap, "heap-MiB")
	b.ReportMetric(held, "store-MiB")
}
