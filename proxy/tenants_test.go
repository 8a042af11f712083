package proxy_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/proxy"
)

// The tenants' tokens, as their variables hold them.
var tenantEnv = map[string]string{
	"UP_KEY":      "sk-upstream-secret",
	"CAPPED_TOKS": "tok-capped-1, tok-capped-2",
	"FREE_TOKS":   "tok-free",
}

// tenantConfig is a config of one upstream at url (dialect d) and the
// tenants capped (at capUSD a day, for model m) and free, plus extra
// keys for tenant capped.
func tenantConfig(url, d, capUSD, extra string) string {
	return `{"upstreams":{"u":{"url":"` + url + `","dialect":"` + d + `","key_env":"UP_KEY"}},
	"prices":{"m":{"input_per_million":10,"output_per_million":10}},
	"tenants":{
		"capped":{"tokens_env":"CAPPED_TOKS","spend_cap_usd":` + capUSD + `,"models":["m"]` + extra + `},
		"free":{"tokens_env":"FREE_TOKS"}}}`
}

// usageUpstream answers every request with a chat completion reporting
// usage (prompt, completion).
func usageUpstream(t *testing.T, prompt, completion int64) (*httptest.Server, *seen) {
	return recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"c","choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, prompt, completion)
	})
}

const chatBody = `{"model":"m","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`

func TestTenantOverCapIsRefusedBeforeSending(t *testing.T) {
	up, seen := usageUpstream(t, 20, 1000)
	front, logs := serveProxy(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "0.05", ""), tenantEnv), Getenv: mapEnv(tenantEnv)})
	// Each request is held at about $0.0102 (1000 output tokens and its
	// body at $10 a million) and settles at $0.0102: four fit in $0.05,
	// the fifth could pass it.
	for i := range 4 {
		resp, body := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-capped-2")
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-capped-1")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Should-Retry") != "false" {
		t.Fatalf("over the cap: %d x-should-retry=%q %s", resp.StatusCode, resp.Header.Get("X-Should-Retry"), body)
	}
	var e struct {
		Error struct{ Message, Type, Code string }
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != "insufficient_quota" || e.Error.Type != "insufficient_quota" {
		t.Fatalf("refusal %s is not OpenAI's insufficient_quota (%v)", body, err)
	}
	for _, want := range []string{`"capped"`, "$0.05 a day"} {
		if !strings.Contains(e.Error.Message, want) {
			t.Errorf("refusal %q does not say %q", e.Error.Message, want)
		}
	}
	_, resets, _ := strings.Cut(e.Error.Message, "it resets at ")
	if at, err := time.Parse(time.RFC3339, resets); err != nil || !at.Equal(at.Truncate(24*time.Hour)) || time.Until(at) > 24*time.Hour || time.Until(at) <= 0 {
		t.Errorf("refusal %q does not say when the cap resets: the next midnight UTC", e.Error.Message)
	}
	if seen.hits != 4 {
		t.Errorf("upstream saw %d requests, want 4: the refused one was sent", seen.hits)
	}
	// The other tenant is not held to it.
	if resp, body := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-free"); resp.StatusCode != 200 {
		t.Fatalf("uncapped tenant: %d %s", resp.StatusCode, body)
	}
	front.Close() // the handlers have logged
	lines := accessLines(t, logs.String())
	var spent float64
	for _, l := range lines[:4] {
		if l["tenant"] != "capped" || l["tenant_cap_usd"] != 0.05 {
			t.Errorf("access line %v lacks the tenant and its cap", l)
		}
		spent += l["cost_usd"].(float64)
	}
	if want := 4 * 1020 * 10 / 1e6; spent < want-1e-9 || spent > want+1e-9 {
		t.Errorf("logged cost %v, want %v", spent, want)
	}
	if l := lines[4]; l["outcome"] != "tenant_spend_cap" || l["status"] != 429.0 {
		t.Errorf("refused line %v", l)
	}
	if l := lines[5]; l["tenant"] != "free" || l["cost_usd"] != 1020*10/1e6 {
		t.Errorf("uncapped line %v: want its tenant and the cost of its usage", l)
	}
}

func mapEnv(env map[string]string) func(string) string {
	return func(k string) string { return env[k] }
}

func TestTenantQuotaRefusalIsEachDialectsOwn(t *testing.T) {
	up, seen := usageUpstream(t, 1, 1)
	for _, c := range []struct {
		dialect, path, body string
		status              int
		want                []string
	}{
		{"openai", "/v1/chat/completions", chatBody, 429, []string{`"code":"insufficient_quota"`}},
		{"anthropic", "/v1/messages", `{"model":"m","max_tokens":10,"messages":[]}`, 402, []string{`"type":"error"`, `"type":"billing_error"`}},
		{"gemini", "/v1beta/models/m:generateContent", `{"contents":[]}`, 429, []string{`"status":"RESOURCE_EXHAUSTED"`, "You exceeded your current quota"}},
	} {
		front, _ := serveProxy(t, proxy.Options{Config: config(t, tenantConfig(up.URL, c.dialect, "0", ""), tenantEnv), Getenv: mapEnv(tenantEnv)})
		resp, body := do(t, "POST", front.URL+c.path, c.body, "X-Api-Key", "tok-capped-1")
		if resp.StatusCode != c.status || resp.Header.Get("X-Should-Retry") != "false" {
			t.Errorf("%s: %d x-should-retry=%q, want %d false", c.dialect, resp.StatusCode, resp.Header.Get("X-Should-Retry"), c.status)
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: refusal %s lacks %s", c.dialect, body, w)
			}
		}
	}
	if seen.hits != 0 {
		t.Errorf("a request past a $0 cap was sent (%d)", seen.hits)
	}
}

func TestTenantModelOutsideItsListIsForbidden(t *testing.T) {
	up, seen := usageUpstream(t, 1, 1)
	front, _ := serveProxy(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "1", ""), tenantEnv), Getenv: mapEnv(tenantEnv)})
	resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"dear","messages":[]}`, "Authorization", "Bearer tok-capped-1")
	if resp.StatusCode != 403 || !strings.Contains(body, `may not use model \"dear\"`) {
		t.Fatalf("other model: %d %s", resp.StatusCode, body)
	}
	if seen.hits != 0 {
		t.Error("a forbidden model's request was sent")
	}
}

func TestTenantOverRateLimitIsToldWhenToComeBack(t *testing.T) {
	up, seen := usageUpstream(t, 1, 1)
	front, _ := serveProxy(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "1", `,"requests_per_minute":1`), tenantEnv), Getenv: mapEnv(tenantEnv)})
	if resp, body := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-capped-1"); resp.StatusCode != 200 {
		t.Fatalf("first: %d %s", resp.StatusCode, body)
	}
	resp, body := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-capped-1")
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "60" || !strings.Contains(body, "rate_limit_exceeded") {
		t.Fatalf("second within the minute: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if seen.hits != 1 {
		t.Errorf("upstream saw %d requests, want 1", seen.hits)
	}
}

func TestTenantStreamSettlesOnItsFinalUsage(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n")
		io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":400}}\n\ndata: [DONE]\n\n")
	})
	front, logs := serveProxy(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "1", ""), tenantEnv), Getenv: mapEnv(tenantEnv)})
	resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m","stream":true,"max_tokens":1000,"messages":[]}`, "Authorization", "Bearer tok-capped-1")
	if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("stream: %d %s", resp.StatusCode, body)
	}
	front.Close()
	l := accessLines(t, logs.String())[0]
	if l["cost_usd"] != 500*10/1e6 || l["stream"] != true {
		t.Errorf("stream settled at %v, want $%v from its final usage", l["cost_usd"], 500*10/1e6)
	}
}

func TestTenantHostileUsageNeitherBreaksNorLowersSpend(t *testing.T) {
	for _, c := range []struct {
		name    string
		usage   string
		refused bool // the next request: the absurd spend is counted
	}{
		{"absurd", `{"prompt_tokens":1000000000000,"completion_tokens":0}`, true},
		// Counts that cannot add up say nothing, as unreadable ones.
		{"overflowing", `{"prompt_tokens":9223372036854775807,"completion_tokens":9223372036854775807}`, false},
		{"negative", `{"prompt_tokens":-5000000,"completion_tokens":-5000000}`, false},
		{"not numbers", `{"prompt_tokens":"a lot","completion_tokens":null}`, false},
	} {
		up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"choices":[],"usage":`+c.usage+`}`)
		})
		front, logs := serveProxy(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "1", ""), tenantEnv), Getenv: mapEnv(tenantEnv)})
		if resp, body := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-capped-1"); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", c.name, resp.StatusCode, body)
		}
		resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-capped-1")
		if refused := resp.StatusCode == 429; refused != c.refused {
			t.Errorf("%s: next request refused=%v, want %v", c.name, refused, c.refused)
		}
		front.Close()
		cost, ok := accessLines(t, logs.String())[0]["cost_usd"].(float64)
		if !ok || math.IsInf(cost, 0) || cost < 0.0101 {
			// Unreadable or negative counts say nothing: the hold stands.
			t.Errorf("%s: logged cost %v, want at least the hold, $0.0101", c.name, cost)
		}
	}
}

func TestTenantTokensNeverInLogsOrMetrics(t *testing.T) {
	up, _ := usageUpstream(t, 1, 1)
	var logs bytes.Buffer
	var p *proxy.Proxy
	p, err := proxy.New(proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "0.000001", `,"requests_per_minute":1`), tenantEnv),
		Getenv: mapEnv(tenantEnv), Tokens: []string{"tok-default"}, Metrics: figuresHandler(&p), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	defer front.Close()
	for _, tok := range []string{"tok-capped-1", "tok-capped-1", "tok-free", "tok-default", "tok-wrong"} {
		do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer "+tok)
		do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"other"}`, "X-Api-Key", tok)
	}
	_, page := do(t, "GET", front.URL+"/metrics", "", "Authorization", "Bearer tok-free", "Accept-Encoding", "gzip")
	for _, want := range []string{
		`rebound_proxy_tenant_requests_total{tenant="free",outcome="answered"} 2`,
		`rebound_proxy_tenant_requests_total{tenant="default",outcome="answered"} 2`,
		`rebound_proxy_tenant_refusals_total{tenant="capped",reason="model"} 2`,
		`rebound_proxy_tenant_refusals_total{tenant="capped",reason="rate_limit"} 1`,
		`rebound_proxy_tenant_refusals_total{tenant="capped",reason="spend_cap"} 1`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("/metrics lacks %s:\n%s", want, page)
		}
	}
	front.Close()
	for _, secret := range []string{"tok-capped", "tok-free", "tok-default", "tok-wrong", "sk-upstream"} {
		if strings.Contains(logs.String(), secret) || strings.Contains(page, secret) {
			t.Errorf("%s... is in the log or /metrics", secret)
		}
	}
	if !strings.Contains(logs.String(), `"tenant":"default"`) {
		t.Error("the --token-env token's requests are not the default tenant's")
	}
}

func TestTenantConfigErrorsNameTheKey(t *testing.T) {
	up := "http://127.0.0.1:1"
	env := map[string]string{"A": "tok-a", "B": "tok-b,tok-a", "EMPTY": " , "}
	for _, c := range []struct{ tenants, prices, want string }{
		{`{"a":{"tokens_env":"A","spend_cap_usd":-1,"models":["m"]}}`, `{"m":{}}`, "tenants.a.spend_cap_usd: -1 is negative"},
		{`{"a":{"tokens_env":"A","spend_cap_usd":1e12,"models":["m"]}}`, `{"m":{}}`, "tenants.a.spend_cap_usd: 1e+12 is negative or above"},
		{`{"a":{"tokens_env":"A","spend_cap_usd":1,"period":"week","models":["m"]}}`, `{"m":{}}`, `tenants.a.period: "week" is not day or month`},
		{`{"a":{"tokens_env":"A","period":"day"}}`, `{}`, "tenants.a.period: given without spend_cap_usd"},
		{`{"a":{"tokens_env":"A","spend_cap_usd":1}}`, `{}`, "tenants.a.models: none listed with spend_cap_usd"},
		{`{"a":{"tokens_env":"A","spend_cap_usd":1,"models":["m","n"]}}`, `{"m":{}}`, `tenants.a.models[1]: "n" has no price`},
		{`{"a":{"tokens_env":"UNSET"}}`, `{}`, "tenants.a.tokens_env: environment variable UNSET is not set"},
		{`{"a":{"tokens_env":"EMPTY"}}`, `{}`, "tenants.a.tokens_env: environment variable EMPTY is not set or holds no token"},
		{`{"a":{}}`, `{}`, "tenants.a.tokens_env: missing"},
		{`{"a":{"tokens_env":"A"},"b":{"tokens_env":"B"}}`, `{}`, `tenants.b.tokens_env: a token in B is also tenant "a"'s`},
		{`{"a b":{"tokens_env":"A"}}`, `{}`, `tenants: name "a b" is not letters`},
		{`{"a":{"tokens_env":"A","requests_per_minute":-1}}`, `{}`, "tenants.a.requests_per_minute: -1 is negative"},
		{`{"a":{"tokens_env":"A","tokens_per_minute":-1}}`, `{}`, "tenants.a.tokens_per_minute: -1 is negative"},
		{`{"a":{"tokens_env":"A","models":[""]}}`, `{}`, "tenants.a.models[0]: empty"},
		{`{}`, `{"m":{"input_per_million":-1}}`, "prices.m: input_per_million is -1: a price per million tokens is from 0 to"},
		{`{}`, `{"m":{"cache_read_per_million":-0.5}}`, "prices.m: cache_read_per_million is -0.5"},
		{`{}`, `{"m":{"cache_write_1h_per_million":1e7}}`, "prices.m: cache_write_1h_per_million is 1e+07"},
		{`{}`, `{"m":{"cache_write_per_million":"1"}}`, "cache_write_per_million"},
		{`{}`, `{"m":{"max_output_tokens":-1}}`, "prices.m: a token count is negative"},
		{`{"a":{"tokens_env":"A","spend_caps_usd":1}}`, `{}`, `unknown field "spend_caps_usd"`},
	} {
		js := `{"upstreams":{"u":{"url":"` + up + `"}},"tenants":` + c.tenants + `,"prices":` + c.prices + `}`
		_, err := proxy.ParseConfig([]byte(js), mapEnv(env))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "tok-") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %v, want one line with %q and no token", c.tenants, err, c.want)
		}
	}
	// A tenant's token that is also --token-env's.
	cfg := config(t, `{"upstreams":{"u":{"url":"`+up+`"}},"tenants":{"a":{"tokens_env":"A"}}}`, env)
	_, err := proxy.New(proxy.Options{Config: cfg, Getenv: mapEnv(env), Tokens: []string{"tok-a"}})
	if err == nil || !strings.Contains(err.Error(), `tenants.a.tokens_env: a token in A is also one of --token-env's`) || strings.Contains(err.Error(), "tok-a") {
		t.Errorf("a tenant's token given to --token-env too: %v", err)
	}
}

func TestTenantsMakeEveryRequestCarryAToken(t *testing.T) {
	up, seen := usageUpstream(t, 1, 1)
	front, _ := serveProxy(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "1", ""), tenantEnv), Getenv: mapEnv(tenantEnv)})
	for _, h := range [][]string{nil, {"Authorization", "Bearer tok-nobody"}} {
		if resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, h...); resp.StatusCode != 401 {
			t.Errorf("token %v: %d, want 401", h, resp.StatusCode)
		}
	}
	if seen.hits != 0 {
		t.Error("a request without a tenant's token was sent")
	}
}

// BenchmarkProxyTenant: the proxy's own work for one request of a
// tenant, in memory, beside the same request of a proxy without tenants:
// what finding the tenant, its limits and its spend cap (the request read
// for what it may cost, held, and settled on the answer's usage) add.
func BenchmarkProxyTenant(b *testing.B) {
	env := map[string]string{"T": "tok-bench"}
	const body = `{"model":"gpt-x","max_tokens":100,"messages":[{"role":"user","content":"hello"}]}`
	for _, c := range []struct{ name, tenants string }{
		{"none", `{}`},
		{"uncapped", `{"t":{"tokens_env":"T"}}`},
		{"capped", `{"t":{"tokens_env":"T","spend_cap_usd":1000000000,"requests_per_minute":1000000000,"models":["gpt-x"]}}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg, err := proxy.ParseConfig([]byte(`{"upstreams":{"u":{"url":"http://upstream.test"}},
				"prices":{"gpt-x":{"input_per_million":1,"output_per_million":1}},"tenants":`+c.tenants+`}`), mapEnv(env))
			if err != nil {
				b.Fatal(err)
			}
			o := proxy.Options{Config: cfg, Getenv: mapEnv(env), Base: cannedUpstream{}, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}
			if c.tenants == `{}` {
				o.Tokens = []string{"tok-bench"}
			}
			p, err := proxy.New(o)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest("POST", "http://127.0.0.1:8080/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer tok-bench")
				rec := httptest.NewRecorder()
				p.ServeHTTP(rec, req)
				if rec.Code != 200 || rec.Body.String() != canned {
					b.Fatalf("status %d: %q", rec.Code, rec.Body)
				}
			}
		})
	}
}

// A tenant's bad value is refused when the config is read, in one line
// that names the key at fault.
func ExampleTenantConfig() {
	_, err := proxy.ParseConfig([]byte(`{
		"upstreams": {"openai": {"url": "https://api.openai.com", "key_env": "OPENAI_API_KEY"}},
		"prices": {"gpt-4o-mini": {"input_per_million": 0.15, "output_per_million": 0.6}},
		"tenants": {"support": {"tokens_env": "SUPPORT_TOKENS", "spend_cap_usd": 20, "period": "week", "models": ["gpt-4o-mini"]}}
	}`), func(string) string { return "set" })
	fmt.Println(err)
	// Output: config: tenants.support.period: "week" is not day or month
}

// TestTenantCostIsPricedAtTheModelThatAnswered: an uncapped tenant's
// request answered by a fallback asked for a cheaper model costs that
// model's price.
func TestTenantCostIsPricedAtTheModelThatAnswered(t *testing.T) {
	down, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusServiceUnavailable) })
	up, _ := usageUpstream(t, 1000, 0)
	js := `{"upstreams":{"down":{"url":"` + down.URL + `"},"up":{"url":"` + up.URL + `"}},
		"routes":[{"upstream":"down","fallbacks":[{"upstream":"up","model":"cheap"}],"policy":{"max_attempts":1}}],
		"prices":{"dear":{"input_per_million":10},"cheap":{"input_per_million":1}},
		"tenants":{"free":{"tokens_env":"FREE_TOKS"}}}`
	front, logs := serveProxy(t, proxy.Options{Config: config(t, js, tenantEnv), Getenv: mapEnv(tenantEnv)})
	if resp, body := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"dear"}`, "Authorization", "Bearer tok-free"); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	front.Close()
	if l := accessLines(t, logs.String())[0]; l["cost_usd"] != 1000*1/1e6 || l["upstream"] != "up" {
		t.Errorf("line %v: want cost_usd $0.001, cheap's price", l)
	}
}

// cacheUpstream answers as providers do when most of the input came from
// their prompt cache: an Anthropic message on /v1/messages (10 tokens read
// afresh, 1 500 written to the cache for five minutes and 500 for an
// hour, 90 000 read from it) and an OpenAI chat completion elsewhere
// (92 010 prompt tokens, 90 000 of them cached), each as a stream when
// asked for one; 200 output tokens each.
func cacheUpstream(t *testing.T) *httptest.Server {
	const (
		anthropicUsage = `{"input_tokens":10,"cache_creation_input_tokens":2000,"cache_read_input_tokens":90000,"cache_creation":{"ephemeral_5m_input_tokens":1500,"ephemeral_1h_input_tokens":500},"output_tokens":%d}`
		openaiUsage    = `{"prompt_tokens":92010,"completion_tokens":200,"total_tokens":92210,"prompt_tokens_details":{"cached_tokens":90000}}`
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		stream := strings.Contains(string(b), `"stream":true`)
		switch {
		case r.URL.Path == "/v1/messages" && stream:
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"usage\":"+anthropicUsage+"}}\n\n", 1)
			io.WriteString(w, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ok\"}}\n\n")
			io.WriteString(w, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":200}}\n\n")
			io.WriteString(w, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		case r.URL.Path == "/v1/messages":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"id":"msg","type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"usage":`+anthropicUsage+`}`, 200)
		case stream:
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n")
			io.WriteString(w, "data: {\"choices\":[],\"usage\":"+openaiUsage+"}\n\ndata: [DONE]\n\n")
		default:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c","choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":`+openaiUsage+`}`)
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// TestTenantSpendWithCachedTokensIsTheBillEverywhere: a capped and an
// uncapped tenant, each sending Anthropic and OpenAI requests, plain and
// streamed, whose answers report most of their input read from the
// provider's cache and some written into it: every access line carries
// the input (all of it), the tokens read from and written into the cache
// and the request's cost, which is the provider's bill at the configured
// prices; each tenant's spend in /metrics and on /ui/status is the sum of
// its lines'.
func TestTenantSpendWithCachedTokensIsTheBillEverywhere(t *testing.T) {
	const (
		in, out, read, write, write1h = 3.0, 15.0, 0.3, 3.75, 6.0 // US dollars per million tokens
	)
	// What each provider bills an answer, from the counts cacheUpstream
	// reports.
	anthropicBill := (10*in + 90000*read + 1500*write + 500*write1h + 200*out) / 1e6
	openaiBill := ((92010-90000)*in + 90000*read + 200*out) / 1e6
	up := cacheUpstream(t)
	js := fmt.Sprintf(`{"upstreams":{"u":{"url":%q,"key_env":"UP_KEY"}},
		"prices":{"m":{"input_per_million":%g,"output_per_million":%g,"cache_read_per_million":%g,"cache_write_per_million":%g,"cache_write_1h_per_million":%g}},
		"tenants":{"capped":{"tokens_env":"CAPPED_TOKS","spend_cap_usd":100,"models":["m"]},"free":{"tokens_env":"FREE_TOKS"}}}`,
		up.URL, in, out, read, write, write1h)
	var logs bytes.Buffer
	var p *proxy.Proxy
	p, err := proxy.New(proxy.Options{Config: config(t, js, tenantEnv), Getenv: mapEnv(tenantEnv), AdminToken: adminToken,
		Metrics: figuresHandler(&p), Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	// In memory, so that each request's access line is written, and its
	// spend settled, before the next request is sent.
	serve := func(method, path, body string, header ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, "http://localhost"+path, strings.NewReader(body))
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return inMemory(p, r)
	}
	type request struct {
		path, body string
		stream     bool
		bill       float64
		input      float64 // every input token
		read       float64
		write      float64
	}
	requests := []request{
		{"/v1/messages", `{"model":"m","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`, false, anthropicBill, 92010, 90000, 2000},
		{"/v1/messages", `{"model":"m","max_tokens":1000,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, true, anthropicBill, 92010, 90000, 2000},
		{"/v1/chat/completions", `{"model":"m","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`, false, openaiBill, 92010, 90000, 0},
		{"/v1/chat/completions", `{"model":"m","max_tokens":1000,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, true, openaiBill, 92010, 90000, 0},
	}
	var want []request
	for _, tok := range []string{"tok-capped-1", "tok-free"} {
		for _, r := range requests {
			if w := serve("POST", r.path, r.body, "Authorization", "Bearer "+tok); w.Code != 200 {
				t.Fatalf("%s %s: %d %s", tok, r.path, w.Code, w.Body)
			}
			want = append(want, r)
		}
	}
	near := func(got, want float64) bool { return math.Abs(got-want) <= 1e-9*want }
	spent := map[string]float64{}
	lines := accessLines(t, logs.String())
	if len(lines) != len(want) {
		t.Fatalf("%d access lines, want %d:\n%s", len(lines), len(want), logs.String())
	}
	for i, l := range lines {
		w := want[i]
		cost, _ := l["cost_usd"].(float64)
		if !near(cost, w.bill) || l["input_tokens"] != w.input || l["output_tokens"] != 200.0 || l["cache_read_tokens"] != w.read {
			t.Errorf("line %d (%s, %v): cost_usd %v, want the bill %v; tokens in %v out %v cache read %v, want %v 200 %v",
				i+1, l["tenant"], l["path"], l["cost_usd"], w.bill, l["input_tokens"], l["output_tokens"], l["cache_read_tokens"], w.input, w.read)
		}
		if stream, _ := l["stream"].(bool); stream != w.stream {
			t.Errorf("line %d (%s, %v): stream %v, want %v", i+1, l["tenant"], l["path"], stream, w.stream)
		}
		if got, _ := l["cache_write_tokens"].(float64); got != w.write {
			t.Errorf("line %d (%s, %v): cache_write_tokens %v, want %v", i+1, l["tenant"], l["path"], l["cache_write_tokens"], w.write)
		}
		spent[l["tenant"].(string)] += cost
	}
	bill := 2 * (anthropicBill + openaiBill)
	page := serve("GET", "/metrics", "", "Authorization", "Bearer "+adminToken).Body.String()
	_, js = readStatus(t, p)
	var st struct {
		Tenants []struct {
			Name     string
			SpentUSD float64 `json:"spent_usd"`
		}
	}
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatalf("/ui/status: %v %s", err, js)
	}
	for _, tenant := range []string{"capped", "free"} {
		if !near(spent[tenant], bill) {
			t.Errorf("%s: the access lines' cost_usd add up to %v, want the bill %v", tenant, spent[tenant], bill)
		}
		var m float64
		series := fmt.Sprintf(`rebound_proxy_tenant_spend_usd_total{tenant=%q} `, tenant)
		for line := range strings.Lines(page) {
			if v, ok := strings.CutPrefix(line, series); ok {
				fmt.Sscan(v, &m)
			}
		}
		if !near(m, bill) {
			t.Errorf("%s: /metrics' spend %v, want the bill %v:\n%s", tenant, m, bill, page)
		}
		found := false
		for _, row := range st.Tenants {
			if row.Name == tenant {
				found = true
				if !near(row.SpentUSD, bill) {
					t.Errorf("%s: /ui/status's spent_usd %v, want the bill %v", tenant, row.SpentUSD, bill)
				}
			}
		}
		if !found {
			t.Errorf("/ui/status has no row of %s: %s", tenant, js)
		}
	}
}
