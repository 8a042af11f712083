package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/internal/chromium"
	"github.com/rebound-go/rebound/internal/npmserver"
)

// pageKey is a row of a pooled key on the status page, as a person reads
// it; pageTenant a row of a tenant.
type (
	pageKey struct {
		Key, Breaker, Headroom string
		Attempts               int64
	}
	pageTenant struct {
		Name, Spend       string
		Requests, Refused int64
	}
)

const readTeamsPage = `JSON.stringify({
	keys: [...document.querySelectorAll('#upstreams tbody tr[data-upstream="pool"]')].map(tr => ({
		Key: tr.dataset.key,
		Breaker: tr.querySelector(".breaker").textContent,
		Headroom: tr.querySelector(".headroom").textContent,
		Attempts: +tr.querySelector(".attempts").textContent,
	})),
	tenants: [...document.querySelectorAll("#tenants tbody tr[data-tenant]")].map(tr => ({
		Name: tr.dataset.tenant,
		Spend: tr.querySelector(".spend").textContent,
		Requests: +tr.querySelector(".requests").textContent,
		Refused: +tr.querySelector(".refused").textContent,
	})),
})`

// TestStatusPageShowsTenantsAndAKeyPoolOfARealRun: rebound proxy with two
// tenants (one capped, priced by the config) and a pool of three keys in
// front of the chaos server's per-key limits, one key out of quota, under
// load from both tenants, in headless Chromium: the page shows each key's
// headroom and the dead key's cool-down, each key's attempts as the chaos
// server and /metrics counted them, each tenant's spend, requests and
// refusals as /metrics counts them, and the tool calls the team made of
// the everything server (an MCP server of the config) with its row; and
// no token (a tenant's or the admin's), key or prompt is in the page, its
// JSON, /metrics or the log. With REBOUND_UI_SCREENSHOT set it writes the
// screenshot of the docs, under the load.
func TestStatusPageShowsTenantsAndAKeyPoolOfARealRun(t *testing.T) {
	t.Parallel()
	browserPath := chromium.Need(t)
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	secret := func(kind string) string { return fmt.Sprintf("%s-%016x", kind, r.Uint64()) }
	const deadPrefix = "sk-ui-dead-"
	keys := map[string]string{"UI_POOL_K1": secret("sk-ui-live-1"), "UI_POOL_K2": secret("sk-ui-live-2"), "UI_POOL_K3": secret(deadPrefix + "3")}
	tokens := map[string]string{"capped": secret("tok-ui-capped"), "team": secret("tok-ui-team")}
	const prompt = "a prompt of the team that stays private"
	for v, value := range keys {
		setenv(t, v, value)
	}
	setenv(t, "UI_CAPPED_TOKENS", tokens["capped"])
	setenv(t, "UI_TEAM_TOKENS", tokens["team"])
	admin := secret("adm-ui")
	setenv(t, "UI_ADMIN_TOKEN", admin)

	chaosURL, _ := startChaos(t, "--mode", "ok", "--profile", "openai", "--key-rpm", "40", "--key-window", "2s",
		"--key-quota-exhausted", deadPrefix)
	const capUSD = 0.01
	server := npmserver.EverythingStdio(t)
	command, _ := json.Marshal(append([]string{server.Path}, server.Args[1:]...))
	config := filepath.Join(t.TempDir(), "proxy.json")
	os.WriteFile(config, []byte(fmt.Sprintf(`{
	"upstreams": {"pool": {"url": %q, "keys_env": ["UI_POOL_K1", "UI_POOL_K2", "UI_POOL_K3"]}},
	"prices": {"gpt-x": {"input_per_million": 100, "output_per_million": 100}},
	"mcp_servers": {"everything": {"command": %s, "tools": {"echo": "read-only"}}},
	"tenants": {
		"capped": {"tokens_env": "UI_CAPPED_TOKENS", "spend_cap_usd": %g, "models": ["gpt-x"]},
		"team": {"tokens_env": "UI_TEAM_TOKENS", "mcp": {"everything": ["echo"]}}}}`, chaosURL, command, capUSD)), 0o600)
	url, logs, _ := startProxy(t, "--config", config, "--admin-token-env", "UI_ADMIN_TOKEN")

	// The load: two clients of each tenant, each calling in turn until
	// stopped. A call under way is let finish, so that every attempt the
	// proxy counts reaches the chaos server.
	load, stopLoad := context.WithCancel(t.Context())
	var clients sync.WaitGroup
	for i := range 4 {
		tenant := []string{"capped", "team"}[i%2]
		clients.Go(func() {
			for load.Err() == nil {
				req, _ := http.NewRequestWithContext(t.Context(), "POST", url+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-x","max_tokens":20,"messages":[{"role":"user","content":"`+prompt+`"}]}`))
				req.Header.Set("Authorization", "Bearer "+tokens[tenant])
				req.Header.Set(chaos.HeaderTally, tenant)
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	defer func() { stopLoad(); clients.Wait() }()

	ui := openStatusPage(t, browserPath, url, 800)
	step := ui.step
	read := func() (map[string]pageKey, map[string]pageTenant) {
		t.Helper()
		js, err := chromedp.Run(step(5*time.Second), chromedp.Evaluate[string](readTeamsPage))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		var page struct {
			Keys    []pageKey
			Tenants []pageTenant
		}
		if err := json.Unmarshal([]byte(js), &page); err != nil {
			t.Fatalf("reading the page: %v: %s", err, js)
		}
		keyRows, tenantRows := map[string]pageKey{}, map[string]pageTenant{}
		for _, k := range page.Keys {
			keyRows[k.Key] = k
		}
		for _, tn := range page.Tenants {
			tenantRows[tn.Name] = tn
		}
		return keyRows, tenantRows
	}

	// Under load: the capped tenant reaches its cap, the live keys'
	// headroom is learnt, the dead key cools down.
	underLoad := `(() => {
		const row = sel => document.querySelector(sel);
		const capped = row('#tenants tr[data-tenant="capped"] .refused');
		const k1 = row('tr[data-upstream="pool"][data-key="UI_POOL_K1"] .headroom');
		const k3 = row('tr[data-upstream="pool"][data-key="UI_POOL_K3"] .breaker');
		return !!capped && +capped.textContent > 0 && !!k1 && k1.textContent !== "unknown" && !!k3 && k3.textContent.includes("cooling until");
	})()`
	if _, err := chromedp.Run(step(15*time.Second), chromedp.Poll[bool](underLoad)); err != nil {
		keyRows, tenantRows := read()
		t.Fatalf("under load the page shows keys %+v, tenants %+v: %v", keyRows, tenantRows, err)
	}
	// The team's tool calls, beside its model calls.
	cs, err := connectProxyMCP(t, url+"/mcp/everything", tokens["team"])
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	for range 3 {
		textOf(t)(cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": prompt}}))
	}
	toolCalls := `+document.querySelector('#tenants tr[data-tenant="team"] .toolcalls')?.textContent === 3 &&
		+document.querySelector('#mcp-servers tr[data-mcp-server="everything"] .calls')?.textContent >= 3`
	if _, err := chromedp.Run(step(10*time.Second), chromedp.Poll[bool](toolCalls)); err != nil {
		t.Fatalf("the page shows neither the team's 3 tool calls nor the everything server's: %v", err)
	}
	if path := os.Getenv(screenshotEnv); path != "" {
		png, err := chromedp.Run(step(10*time.Second), chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot under load: %s, %d bytes", path, len(png))
	}
	stopLoad()
	clients.Wait()

	// After the load: the page's figures are the chaos server's and
	// /metrics'. The proxy may still be ending a call a client left: each
	// try reads them again and waits for the page's next refresh.
	var (
		st      chaos.Stats
		metrics string
		want    string
	)
	for try := 1; ; try++ {
		st = chaosStats(t, chaosURL)
		_, metrics = get(t, url+"/metrics")
		var checks []string
		for v, value := range keys {
			checks = append(checks, fmt.Sprintf(`+row('tr[data-upstream="pool"][data-key="%s"] .attempts') === %d`, v, st.Keys[chaos.KeyLabel(value)].Requests))
		}
		for tenant := range tokens {
			answered := tenantMetric(t, metrics, "answered", tenant)
			failed := tenantMetric(t, metrics, "failed", tenant)
			refused := tenantMetric(t, metrics, "refused", tenant)
			spent := tenantSpendFrom(t, metrics, tenant)
			checks = append(checks,
				fmt.Sprintf(`+row('#tenants tr[data-tenant="%s"] .requests') === %d`, tenant, answered+failed+refused),
				fmt.Sprintf(`+row('#tenants tr[data-tenant="%s"] .refused') === %d`, tenant, refused),
				fmt.Sprintf(`row('#tenants tr[data-tenant="%s"] .spend').startsWith(%q)`, tenant, fmt.Sprintf("$%.4f", spent)),
				// The chaos server caches nothing: none of the input was
				// read from a cache, which the page says of each tenant
				// that had an answer.
				fmt.Sprintf(`row('#tenants tr[data-tenant="%s"] .cached') === "0.0%%"`, tenant))
		}
		want = strings.Join(checks, " &&\n")
		settled := `(() => { const row = sel => document.querySelector(sel)?.textContent; return ` + want + `; })()`
		if _, err := chromedp.Run(step(3*time.Second), chromedp.Poll[bool](settled)); err == nil {
			break
		}
		if try == 4 {
			keyRows, tenantRows := read()
			t.Fatalf("the page shows keys %+v, tenants %+v; want\n%s", keyRows, tenantRows, want)
		}
	}
	keyRows, tenantRows := read()
	t.Logf("the page after the load: keys %+v, tenants %+v", keyRows, tenantRows)
	for v := range keys {
		if n := metricSum(t, metrics, "rebound_attempts_total", "pool/"+v+":"); n != keyRows[v].Attempts {
			t.Errorf("%s: /metrics counts %d attempts, the page %d", v, n, keyRows[v].Attempts)
		}
	}
	if k3 := st.Keys[chaos.KeyLabel(keys["UI_POOL_K3"])]; k3.Admitted != 0 || k3.OutOfQuota == 0 {
		t.Errorf("the dead key at the chaos server: %+v", k3)
	}
	if keyRows["UI_POOL_K1"].Attempts == 0 || keyRows["UI_POOL_K2"].Attempts == 0 {
		t.Errorf("the load did not use both live keys: %+v", keyRows)
	}
	billed := st.Tallies["capped"]["gpt-x"]
	if usd := float64(billed.InputTokens+billed.OutputTokens) * 100 / 1e6; usd > capUSD {
		t.Errorf("the capped tenant was billed $%.6f by the chaos server, past its cap $%g", usd, capUSD)
	}
	if tenantRows["team"].Refused != 0 || tenantRows["team"].Requests == 0 {
		t.Errorf("the uncapped tenant: %+v", tenantRows["team"])
	}

	// Nothing secret anywhere a person or a scraper reads.
	text, err := chromedp.Run(step(5*time.Second), chromedp.Evaluate[string](`document.documentElement.outerHTML + document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	_, status := get(t, url+"/ui/status")
	secrets := []string{prompt, tokens["capped"], tokens["team"], admin}
	for _, value := range keys {
		secrets = append(secrets, value)
	}
	for where, s := range map[string]string{"the page": text, "/ui/status": status, "/metrics": metrics, "the log": logs.String()} {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				t.Errorf("%s holds a secret (%.12s…)", where, secret)
			}
		}
	}
	for _, u := range ui.requests() {
		if u != url+"/ui" && u != url+"/ui/status" && !strings.HasPrefix(u, "data:") {
			t.Errorf("the page requested %s: not the proxy's status", u)
		}
	}
}

// tenantMetric returns rebound_proxy_tenant_requests_total of tenant and
// outcome in metrics.
func tenantMetric(t *testing.T, metrics, outcome, tenant string) int64 {
	t.Helper()
	return int64(metricLine(t, metrics, fmt.Sprintf("rebound_proxy_tenant_requests_total{tenant=%q,outcome=%q}", tenant, outcome)))
}

// tenantSpendFrom returns rebound_proxy_tenant_spend_usd_total of tenant
// in metrics.
func tenantSpendFrom(t *testing.T, metrics, tenant string) float64 {
	t.Helper()
	return metricLine(t, metrics, fmt.Sprintf("rebound_proxy_tenant_spend_usd_total{tenant=%q}", tenant))
}

// metricLine returns the value of the sample series in metrics.
//
// series is a name and its labels, name{k="v",...}: a line of that name
// matches when it carries each of the labels, in any order and beside
// others (the exporter adds otel_scope_name and the like).
func metricLine(t *testing.T, metrics, series string) float64 {
	t.Helper()
	name, labels, _ := strings.Cut(strings.TrimSuffix(series, "}"), "{")
	for line := range strings.Lines(metrics) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), name+"{")
		if !ok {
			continue
		}
		got, v, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		matched := true
		for l := range strings.SplitSeq(labels, ",") {
			if l != "" && !slices.Contains(strings.Split(got, ","), l) {
				matched = false
			}
		}
		if matched {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", series)
	return 0
}
