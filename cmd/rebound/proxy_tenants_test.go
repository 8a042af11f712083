package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/internal/npmserver"
)

// The tenants of the scenarios: "capped" may spend $0.05 a day on
// capped-model, at $100 a million tokens (a request is held at about
// $0.005 and costs about $0.0007 at the chaos server: some seventy fit);
// "free" has no cap.
const (
	tenantCapUSD      = 0.05
	tenantPricePerTok = 100 / 1e6
)

// tenantsConfigs numbers the calls of tenantsConfig, so that each sets
// variables of its own.
var tenantsConfigs atomic.Int64

// tenantsConfig writes the config of the scenarios, in front of the
// chaos server at url, and sets the tenants' token variables.
func tenantsConfig(t *testing.T, url string) string {
	// Variables of the test's own: the tests that use them run in parallel.
	v := fmt.Sprintf("TEST_TENANTS_%d_", tenantsConfigs.Add(1))
	setenv(t, v+"UPSTREAM_KEY", "sk-chaos-upstream")
	setenv(t, v+"CAPPED", "tok-capped-secret")
	setenv(t, v+"FREE", "tok-free-secret")
	setenv(t, v+"PACED", "tok-paced-secret")
	cfg := fmt.Sprintf(`{
	"upstreams": {"chaos": {"url": %[1]q, "key_env": "%[3]sUPSTREAM_KEY"}},
	"prices": {
		"capped-model": {"input_per_million": 100, "output_per_million": 100},
		"free-model": {"input_per_million": 100, "output_per_million": 100}},
	"tenants": {
		"capped": {"tokens_env": "%[3]sCAPPED", "spend_cap_usd": %[2]g, "period": "day", "models": ["capped-model"]},
		"free": {"tokens_env": "%[3]sFREE"},
		"paced": {"tokens_env": "%[3]sPACED", "requests_per_minute": 6}}}`, url, tenantCapUSD, v)
	file := filepath.Join(t.TempDir(), "proxy.json")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// chaosUpstream serves a chaos server of the openai profile that fails a
// fifth of its requests (429, 503, 500), seeded.
func chaosUpstream(t *testing.T) (*chaos.Server, string) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("chaos seed %d", seed)
	srv, err := chaos.New(chaos.Config{Profile: chaos.ProfileOpenAI, Mode: chaos.ModeRandom, FailRate: 0.2, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, hs.URL
}

// sdkScript calls chat completions CALLS times, CONCURRENCY at once,
// through the official OpenAI SDK with its own retries (MAX_RETRIES), and
// prints what came of the calls as one JSON object.
const sdkScript = `
const OpenAI = require("openai");
const env = process.env;
const client = new OpenAI({baseURL: env.BASE_URL + "/v1", apiKey: env.TOKEN, maxRetries: Number(env.MAX_RETRIES),
	timeout: 20000, defaultHeaders: {"X-Chaos-Tally": env.TALLY}});
const out = {calls: 0, ok: 0, quota: 0, other: 0, statuses: {}};
async function worker() {
	while (out.calls < Number(env.CALLS)) {
		out.calls++;
		try {
			await client.chat.completions.create({model: env.MODEL, max_tokens: 20, messages: [{role: "user", content: "hi there"}]});
			out.ok++;
		} catch (e) {
			if (e.status === 429 && e.code === "insufficient_quota") out.quota++;
			else { out.other++; out.statuses[String(e.status)] = (out.statuses[String(e.status)] || 0) + 1; }
		}
	}
}
Promise.all(Array.from({length: Number(env.CONCURRENCY)}, worker)).then(() => console.log(JSON.stringify(out)));
`

// sdkRun is what the script printed.
type sdkRun struct {
	Calls, OK, Quota, Other int
	Statuses                map[string]int
}

// runSDK runs the script as tenant (its token, its model) against the
// proxy at url.
func runSDK(t *testing.T, script, url, tenant, token string, calls, retries int) sdkRun {
	cmd := npmserver.NodeScript(t, npmserver.OpenAI, script, "BASE_URL="+url, "TOKEN="+token, "TALLY="+tenant,
		"MODEL="+tenant+"-model", fmt.Sprint("CALLS=", calls), "CONCURRENCY=10", fmt.Sprint("MAX_RETRIES=", retries))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	var r sdkRun
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("node printed %q: %v", out, err)
	}
	return r
}

// TestTenantCapHoldsForTheOpenAINodeSDK: two tenants call the same
// upstream through rebound proxy from the official OpenAI Node SDK, one
// capped at $0.05 a day. The chaos server bills the capped one no more
// than its cap, its SDK (left to retry, as it does by default) sends
// each refusal once, and the other tenant answers as well as it did
// alone.
func TestTenantCapHoldsForTheOpenAINodeSDK(t *testing.T) {
	t.Parallel()
	up, upURL := chaosUpstream(t)
	url, logs, stop := startProxy(t, "--config", tenantsConfig(t, upURL))
	script := filepath.Join(t.TempDir(), "sdk.js")
	if err := os.WriteFile(script, []byte(sdkScript), 0o600); err != nil {
		t.Fatal(err)
	}

	alone := runSDK(t, script, url, "free", "tok-free-secret", 30, 0)
	var capped, shared sdkRun
	var wg sync.WaitGroup
	wg.Go(func() { capped = runSDK(t, script, url, "capped", "tok-capped-secret", 100, 2) })
	wg.Go(func() { shared = runSDK(t, script, url, "free", "tok-free-secret", 30, 0) })
	wg.Wait()
	metrics := getWithToken(t, url+"/metrics", "tok-free-secret")
	stop()

	tally := up.Stats().Tallies["capped"]["capped-model"]
	billed := float64(tally.InputTokens+tally.OutputTokens) * tenantPricePerTok
	t.Logf("capped: %+v, billed $%.4f of $%.2f in %d requests; free alone %d/%d, beside it %d/%d",
		capped, billed, tenantCapUSD, tally.Requests, alone.OK, alone.Calls, shared.OK, shared.Calls)
	if billed > tenantCapUSD {
		t.Errorf("the chaos server billed the capped tenant $%.6f, past its cap of $%.2f", billed, tenantCapUSD)
	}
	if capped.Quota == 0 || capped.OK == 0 {
		t.Errorf("capped tenant: %d answered, %d refused: want both (the cap reached within the run)", capped.OK, capped.Quota)
	}
	var refusals, attempts int
	for _, l := range strings.Split(logs.String(), "\n") {
		var line struct {
			Msg, Tenant, Outcome string
			Attempts             int
		}
		if json.Unmarshal([]byte(l), &line) != nil || line.Msg != "request" || line.Tenant != "capped" {
			continue
		}
		attempts += line.Attempts
		if line.Outcome == "tenant_spend_cap" {
			refusals++ // before its first attempt, or before a retry
		}
	}
	if refusals != capped.Quota {
		t.Errorf("the proxy refused %d requests, the SDK saw %d refusals: it retried them", refusals, capped.Quota)
	}
	if got := metricLine(t, metrics, `rebound_proxy_tenant_refusals_total{tenant="capped",reason="spend_cap"}`); got != float64(refusals) {
		t.Errorf("/metrics says %v refusals on the spend cap, want %d", got, refusals)
	}
	if attempts != tally.Requests {
		// An attempt the cap refused is not counted: none was sent.
		t.Errorf("the proxy logged %d attempts of the capped tenant, the chaos server saw %d requests", attempts, tally.Requests)
	}
	rateAlone, rateShared := float64(alone.OK)/float64(alone.Calls), float64(shared.OK)/float64(shared.Calls)
	if rateAlone < 0.9 || rateShared < rateAlone-0.1 {
		t.Errorf("free tenant answered %.2f alone and %.2f beside the capped one: want both about the same (within 3 calls in 30), at least 0.9", rateAlone, rateShared)
	}
	// rebound analyze reads the proxy's log: spend and refusals by tenant.
	logFile := filepath.Join(t.TempDir(), "proxy.log")
	if err := os.WriteFile(logFile, []byte(logs.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCmd("analyze", "--json", logFile)
	var report struct {
		Tenants []struct {
			Name           string
			Calls, Refused int64
			SpendUSD       *float64 `json:"spend_usd"`
			CapUSD         *float64 `json:"cap_usd"`
		}
	}
	if err := json.Unmarshal([]byte(stdout), &report); code != 0 || err != nil {
		t.Fatalf("rebound analyze: exit %d, %v, stderr %q", code, err, stderr)
	}
	found := false
	for _, tn := range report.Tenants {
		if tn.Name != "capped" {
			continue
		}
		found = true
		if tn.Refused != int64(refusals) || tn.SpendUSD == nil || *tn.SpendUSD > tenantCapUSD || tn.CapUSD == nil || *tn.CapUSD != tenantCapUSD {
			t.Errorf("rebound analyze says the capped tenant had %d refused, spent %v of %v; the proxy refused %d", tn.Refused, tn.SpendUSD, tn.CapUSD, refusals)
		}
		t.Logf("rebound analyze: capped tenant %d calls, %d refused, $%.4f spent", tn.Calls, tn.Refused, *tn.SpendUSD)
	}
	if !found {
		t.Errorf("rebound analyze reports no tenant \"capped\": %s", stdout)
	}
	for _, secret := range []string{"tok-capped-secret", "tok-free-secret", "sk-chaos-upstream"} {
		if strings.Contains(logs.String(), secret) || strings.Contains(metrics, secret) {
			t.Errorf("a token or key is in the proxy's log or /metrics")
		}
	}
}

// TestTenantCapAndLimitHoldAcrossTwoProxiesOnRedis: two rebound proxy
// processes sharing Redis hold a tenant, hammering both, to one spend cap,
// and another to one requests_per_minute.
func TestTenantCapAndLimitHoldAcrossTwoProxiesOnRedis(t *testing.T) {
	t.Parallel()
	up, upURL := chaosUpstream(t)
	config := tenantsConfig(t, upURL)
	prefix := fmt.Sprintf("rebound-test-tenants-%d:", time.Now().UnixNano())
	const redisURL = "redis://127.0.0.1:6379/0?protocol=2"
	t.Cleanup(func() { deleteKeys(t, redisURL, prefix) })
	var urls []string
	for range 2 {
		urls = append(urls, startProxyProcess(t, nil, "--config", config,
			"--redis", redisURL, "--redis-timeout", sharedDecision, "--redis-prefix", prefix, "--replicas", "2"))
	}
	const calls = 160
	var next, ok, refused atomic.Int64
	refusedBy := make([]atomic.Int64, len(urls))
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for n := next.Add(1); n <= calls; n = next.Add(1) {
				i := (int(n) + w) % len(urls)
				resp, body := post(t, urls[i]+"/v1/chat/completions", `{"model":"capped-model","max_tokens":20,"messages":[{"role":"user","content":"hi there"}]}`,
					"Authorization", "Bearer tok-capped-secret", "X-Chaos-Tally", "capped")
				switch {
				case resp.StatusCode == 200:
					ok.Add(1)
				case resp.StatusCode == 429 && strings.Contains(body, "insufficient_quota"):
					refused.Add(1)
					refusedBy[i].Add(1)
				}
			}
		})
	}
	wg.Wait()
	tally := up.Stats().Tallies["capped"]["capped-model"]
	billed := float64(tally.InputTokens+tally.OutputTokens) * tenantPricePerTok
	t.Logf("two proxies: %d answered, %d refused (%d by the first, %d by the second); billed $%.4f of $%.2f",
		ok.Load(), refused.Load(), refusedBy[0].Load(), refusedBy[1].Load(), billed, tenantCapUSD)
	if billed > tenantCapUSD {
		t.Errorf("billed $%.6f across the two proxies, past the cap of $%.2f", billed, tenantCapUSD)
	}
	// Each proxy alone, with a cap of its own, would have answered about
	// seventy: together they must not answer much more than that. Nor
	// much less: with Redis answering, the one cap is spent by both (63
	// answered is usual); a cap left mostly unspent would mean each
	// replica kept to a local share.
	if refusedBy[0].Load() == 0 || refusedBy[1].Load() == 0 || ok.Load() > 80 || ok.Load() < 35 {
		t.Errorf("%d answered, refusals %d and %d: want the one cap reached, and mostly spent, by both proxies", ok.Load(), refusedBy[0].Load(), refusedBy[1].Load())
	}

	// Each proxy's status page shows the cap's spend on Redis, settled
	// by both: the sum of the two processes' own /metrics series. A
	// proxy that found Redis slow under the load keeps what it spent
	// meanwhile until its next decision: each round reads the pages
	// (which asks Redis again), has each proxy decide once, then reads
	// them again.
	for round := 1; ; round++ {
		for _, u := range urls {
			statusPageTenantSpend(t, u, "capped")
			post(t, u+"/v1/chat/completions", `{"model":"capped-model","max_tokens":20,"messages":[{"role":"user","content":"hi there"}]}`,
				"Authorization", "Bearer tok-capped-secret", "X-Chaos-Tally", "capped")
		}
		var settled float64
		for _, u := range urls {
			settled += tenantSpendMetric(t, u, "capped")
		}
		spent := []float64{statusPageTenantSpend(t, urls[0], "capped"), statusPageTenantSpend(t, urls[1], "capped")}
		t.Logf("round %d: the status pages show the capped tenant's spend $%.6f and $%.6f; the two proxies' /metrics $%.6f", round, spent[0], spent[1], settled)
		if math.Abs(spent[0]-settled) < 1e-5 && math.Abs(spent[1]-settled) < 1e-5 && (ok.Load() == 0 || settled > 0) {
			break
		}
		if round == 3 {
			t.Errorf("the status pages show the capped tenant's spend $%.6f and $%.6f; want $%.6f, what both proxies settled", spent[0], spent[1], settled)
			break
		}
	}

	// A tenant of 6 requests a minute (a request every 10 s, one at a
	// time) gets one through the two proxies together, not one from each.
	admitted := 0
	for i := range 6 {
		resp, body := post(t, urls[i%2]+"/v1/chat/completions", `{"model":"free-model","messages":[]}`, "Authorization", "Bearer tok-paced-secret")
		switch {
		case resp.StatusCode == 429 && strings.Contains(body, `tenant \"paced\" is over its rate limit`):
			if ra := resp.Header.Get("Retry-After"); ra != "10" {
				t.Errorf("Retry-After %q, want 10 (a request every 10 s)", ra)
			}
		default:
			admitted++
		}
	}
	if admitted != 1 {
		t.Errorf("%d of 6 requests of a tenant of 6 a minute went through two proxies at once, want 1: the limit is not shared", admitted)
	}
}

// sharedDecision is the --redis-timeout of the tests that check what two
// proxies share: the default 5 ms is what a production Redis answers in,
// but a test machine busy with other tests can take longer, and then each
// replica decides alone, as it should, and the sharing is not what is
// tested.
const sharedDecision = "1s"

// tenantSpendMetric returns the rebound_proxy_tenant_spend_usd_total of
// tenant on the /metrics of the proxy at url.
func tenantSpendMetric(t *testing.T, url, tenant string) float64 {
	t.Helper()
	resp, body := get(t, url+"/metrics")
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d", resp.StatusCode)
	}
	return metricLine(t, body, fmt.Sprintf("rebound_proxy_tenant_spend_usd_total{tenant=%q}", tenant))
}

// statusPageTenantSpend returns the spend of tenant that the status page of
// the proxy at url shows.
func statusPageTenantSpend(t *testing.T, url, tenant string) float64 {
	t.Helper()
	resp, err := http.Get(url + "/ui/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var status struct {
		Tenants []struct {
			Name     string  `json:"name"`
			SpentUSD float64 `json:"spent_usd"`
		} `json:"tenants"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&status); err != nil {
		t.Fatalf("/ui/status: %v", err)
	}
	for _, tn := range status.Tenants {
		if tn.Name == tenant {
			return tn.SpentUSD
		}
	}
	t.Fatalf("/ui/status has no tenant %q: %+v", tenant, status.Tenants)
	return 0
}

// deleteKeys deletes the keys under prefix on the Redis at url.
func deleteKeys(t *testing.T, url, prefix string) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Error(err)
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err == nil && len(keys) > 0 {
		err = c.Del(ctx, keys...).Err()
	}
	if err != nil {
		t.Errorf("cleaning up Redis: %v", err)
	}
}

// getWithToken GETs url with a client token and returns the body.
func getWithToken(t *testing.T, url, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}
