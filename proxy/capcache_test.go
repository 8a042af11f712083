package proxy_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/usage"
	"github.com/rebound-go/rebound/proxy"
)

// countsUpstream answers as its dialect does, plain or streamed, with
// usage counts c in the dialect's own fields (internal/usage's table).
func countsUpstream(t *testing.T, c usage.Counts) *httptest.Server {
	var s *seen
	up, s := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		s.mu.Lock()
		stream := strings.Contains(s.body, `"stream":true`)
		s.mu.Unlock()
		anthropic := strings.HasSuffix(r.URL.Path, "/v1/messages")
		js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		switch {
		case anthropic && stream:
			w.Header().Set("Content-Type", "text/event-stream")
			start := usage.Anthropic.Object(usage.Counts{Input: c.Input, CacheRead: c.CacheRead, CacheWrite: c.CacheWrite, CacheWrite1h: c.CacheWrite1h, Output: 1})
			fmt.Fprintf(w, "event: message_start\ndata: %s\n\n", js(map[string]any{"type": "message_start", "message": map[string]any{"id": "m", "type": "message", "role": "assistant", "content": []any{}, "usage": start}}))
			fmt.Fprint(w, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n")
			fmt.Fprint(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n")
			fmt.Fprint(w, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n")
			fmt.Fprintf(w, "event: message_delta\ndata: %s\n\n", js(map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": "end_turn"}, "usage": map[string]any{"output_tokens": c.Output}}))
			fmt.Fprint(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		case anthropic:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, js(map[string]any{"id": "m", "type": "message", "role": "assistant", "content": []any{map[string]any{"type": "text", "text": "ok"}}, "stop_reason": "end_turn", "usage": usage.Anthropic.Object(c)}))
		case stream:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n")
			fmt.Fprint(w, "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n")
			fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", js(map[string]any{"id": "c", "choices": []any{}, "usage": usage.OpenAIChat.Object(c)}))
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, js(map[string]any{"id": "c", "choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": "ok"}, "finish_reason": "stop"}}, "usage": usage.OpenAIChat.Object(c)}))
		}
	})
	return up
}

// bill is what a provider charges for c at p.
func bill(c usage.Counts, p cost.Price) float64 {
	return p.Of(cost.Usage{InputTokens: c.Input, CacheReadTokens: c.CacheRead, CacheWriteTokens: c.CacheWrite, CacheWrite1hTokens: c.CacheWrite1h, OutputTokens: c.Output})
}

// TestTenantCapOfCacheReadsIsServedNearlyToIt: a tenant capped at $C
// whose requests are mostly read from the provider's cache is served
// until at least 85% of $C is billed, and is never billed past it: each
// request is held at the dearest its input may cost (an hour's cache
// write, on Anthropic) and settled at what it did cost, so the cap
// refuses only the request that could pass it. (With cached tokens
// priced as input, the tenant was refused after an eighth of its cap's
// real spend.)
func TestTenantCapOfCacheReadsIsServedNearlyToIt(t *testing.T) {
	const capUSD = 1.0
	price := cost.Price{InputPerMillion: 3, OutputPerMillion: 15, CacheReadPerMillion: 0.3, CacheWritePerMillion: 3.75, CacheWrite1hPerMillion: 6}
	counts := usage.Counts{Input: 10, CacheRead: 9000, Output: 100}
	up := countsUpstream(t, counts)
	prices, _ := json.Marshal(map[string]cost.Price{"m": price})
	cfg := config(t, `{"upstreams":{"u":{"url":"`+up.URL+`","dialect":"anthropic","key_env":"UP_KEY"}},
		"prices":`+string(prices)+`,
		"tenants":{"capped":{"tokens_env":"CAPPED_TOKS","spend_cap_usd":`+fmt.Sprint(capUSD)+`,"models":["m"]}}}`, tenantEnv)
	front, logs := serveProxy(t, proxy.Options{Config: cfg, Getenv: mapEnv(tenantEnv)})
	prompt := strings.Repeat("abcd", int(counts.CacheRead+counts.Input)) // a token every 4 bytes, as the estimate counts
	body := `{"model":"m","max_tokens":100,"system":"` + prompt + `","messages":[{"role":"user","content":"hi"}]}`
	served := 0
	for ; served < 1000; served++ {
		resp, got := do(t, "POST", front.URL+"/v1/messages", body, "Authorization", "Bearer tok-capped-1", "Content-Type", "application/json")
		if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusPaymentRequired { // the cap's refusal, in the dialect
			break
		}
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", served+1, resp.StatusCode, got)
		}
	}
	front.Close()
	billed := 0.0
	for _, line := range accessLines(t, logs.String()) {
		c, _ := line["cost_usd"].(float64)
		billed += c
	}
	if want := float64(served) * bill(counts, price); math.Abs(billed-want) > want/100 {
		t.Errorf("billed $%.4f for %d requests, the provider's bill $%.4f", billed, served, want)
	}
	if billed < 0.85*capUSD || billed > capUSD {
		t.Errorf("served %d requests, billed $%.4f of a $%.2f cap; want from 85%% of it to all of it", served, billed, capUSD)
	}
}
