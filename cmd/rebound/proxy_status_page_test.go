package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/rebound-go/rebound/internal/chromium"
)

// screenshotEnv names the file TestStatusPageShowsTenantsAndAKeyPoolOfARealRun
// writes a screenshot of the page under load to (docs/ui.png).
const screenshotEnv = "REBOUND_UI_SCREENSHOT"

// pageRow is a row of the status page's upstream table, as a person reads it.
type pageRow struct {
	Upstream, Host, Breaker, Failures string
	InFlight, Calls, Attempts         int64
	First, AfterRetries, GaveUp       int64
	Broken                            int64
	Cached                            string // the share of input read from the cache
}

// readPage is the script that reads the page's upstream rows.
const readPage = `JSON.stringify([...document.querySelectorAll("#upstreams tbody tr[data-upstream]")].map(tr => ({
	Upstream: tr.dataset.upstream,
	Host: tr.querySelector(".host").textContent,
	Breaker: tr.querySelector(".breaker").textContent,
	First: +tr.querySelector(".first").textContent,
	AfterRetries: +tr.querySelector(".afterretries").textContent,
	GaveUp: +tr.querySelector(".gaveup").textContent,
	Broken: +tr.querySelector(".broken").textContent,
	Failures: tr.querySelector(".failures").textContent,
	InFlight: +tr.querySelector(".inflight").textContent,
	Calls: +tr.querySelector(".calls").textContent,
	Attempts: +tr.querySelector(".attempts").textContent,
	Cached: tr.querySelector(".cached").textContent,
})))`

// pageChart is the status page's chart of an upstream, as drawn.
type pageChart struct {
	Upstream string
	Title    string         // what it says of its 30 minutes
	Points   map[string]int // the points of each line, by its class
	Raised   map[string]int // the points of each line above zero
	Ticks    int            // the minute ticks
}

// readCharts is the script that reads the page's charts.
const readCharts = `JSON.stringify([...document.querySelectorAll("#charts figure[data-upstream]")].map(f => {
	const svg = f.querySelector("svg"), base = Math.max(...[...svg.querySelectorAll("polyline")].flatMap(l => [...l.points].map(p => p.y)));
	const lines = [...svg.querySelectorAll("polyline")];
	return {
		Upstream: f.dataset.upstream,
		Title: svg.querySelector("title").textContent,
		Points: Object.fromEntries(lines.map(l => [l.getAttribute("class"), l.points.length])),
		Raised: Object.fromEntries(lines.map(l => [l.getAttribute("class"), [...l.points].filter(p => p.y < base).length])),
		Ticks: svg.querySelectorAll("line.tick").length,
	};
}))`

// charts reads the page's charts in the browser of step, by upstream.
func charts(t *testing.T, step func(time.Duration) context.Context) map[string]pageChart {
	t.Helper()
	js, err := chromedp.Run(step(5*time.Second), chromedp.Evaluate[string](readCharts))
	if err != nil {
		t.Fatalf("reading the charts: %v", err)
	}
	var list []pageChart
	if err := json.Unmarshal([]byte(js), &list); err != nil {
		t.Fatalf("reading the charts: %v: %s", err, js)
	}
	byName := map[string]pageChart{}
	for _, c := range list {
		byName[c.Upstream] = c
	}
	return byName
}

// TestStatusPageInChromiumUnderLoad: rebound proxy's status page, in a
// real headless Chromium, while clients call through a flaky upstream:
// every request the page makes goes to the proxy's own origin; it shows
// the attempts of the run, which /metrics counts too, the failures by
// kind and the last failures, the share of input read from the cache
// (flaky's answers report 3 of 4 input tokens cached, backup's no usage),
// and no key or prompt; each row's calls answered at once, after retries
// or given up, which add up to its calls; a chart per upstream of its
// calls, retries and give-ups in each of the last 30 minutes, with the
// calls of the row; and its figures move while the load runs, without a
// reload. A pool's chart adds up its keys'.
func TestStatusPageInChromiumUnderLoad(t *testing.T) {
	t.Parallel()
	browserPath := chromium.Need(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(uint64(seed), 1))
	const upstreamKey = "sk-upstream-secret-91c4e0"
	const prompt = "a prompt that stays private"
	flaky := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		wait, roll := time.Duration(5+rng.IntN(25))*time.Millisecond, rng.Float64()
		mu.Unlock()
		time.Sleep(wait) // the upstream's own time, for the latencies shown
		switch {
		case roll < 0.25:
			w.WriteHeader(503)
			io.WriteString(w, `{"error":{"message":"busy; your key is `+upstreamKey+`"}}`)
		case roll < 0.30:
			w.Header().Set("Retry-After-Ms", "20")
			w.WriteHeader(429)
			io.WriteString(w, `{"error":{"type":"rate_limit_error","code":"rate_limit_exceeded","message":"slow down"}}`)
		default:
			io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}],"usage":{"prompt_tokens":4,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":3}}}`)
		}
	})
	backup := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		io.WriteString(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	})
	setenv(t, "TEST_UI_KEY", upstreamKey)
	config := filepath.Join(t.TempDir(), "proxy.json")
	os.WriteFile(config, []byte(`{"upstreams":{"flaky":{"url":"`+flaky.URL+`","key_env":"TEST_UI_KEY"},"backup":{"url":"`+backup.URL+`"}},
		"routes":[{"name":"chat","upstream":"flaky","fallbacks":[{"upstream":"backup"}]}],
		"policy":{"base_delay_ms":10,"max_delay_ms":50}}`), 0o600)
	url, logs, _ := startProxy(t, "--config", config)

	// The load: four clients, each calling in turn until stopped.
	load, stopLoad := context.WithCancel(t.Context())
	var clients sync.WaitGroup
	for range 4 {
		clients.Go(func() {
			for load.Err() == nil {
				req, _ := http.NewRequestWithContext(load, "POST", url+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"`+prompt+`"}]}`))
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	defer func() { stopLoad(); clients.Wait() }()

	ui := openStatusPage(t, browserPath, url, 720)
	browser, step := ui.browser, ui.step
	rows := func() map[string]pageRow {
		t.Helper()
		js, err := chromedp.Run(step(5*time.Second), chromedp.Evaluate[string](readPage))
		if err != nil {
			t.Fatalf("reading the page: %v", err)
		}
		var list []pageRow
		if err := json.Unmarshal([]byte(js), &list); err != nil {
			t.Fatalf("reading the page: %v: %s", err, js)
		}
		byName := map[string]pageRow{}
		for _, r := range list {
			byName[r.Upstream] = r
		}
		return byName
	}

	// Under load: the figures move between two reads, without a reload.
	if _, err := chromedp.Run(step(10*time.Second), chromedp.Poll[bool](`+document.querySelector('tr[data-upstream="flaky"] .attempts')?.textContent > 0`)); err != nil {
		t.Fatalf("the page shows no attempt to flaky under load: %v", err)
	}
	first := rows()["flaky"]
	if _, err := chromedp.Run(step(10*time.Second), chromedp.Poll[bool](fmt.Sprintf(`+document.querySelector('tr[data-upstream="flaky"] .attempts').textContent > %d`, first.Attempts))); err != nil {
		t.Fatalf("the page's attempts stayed at %d under load: %v", first.Attempts, err)
	}
	// After the load: the page shows what /metrics counts.
	stopLoad()
	clients.Wait()
	// The proxy may still be ending a call a client left: each try reads
	// /metrics again and waits for the page's next refresh.
	var attempts, backupAttempts int64
	for try := 1; ; try++ {
		_, metrics := get(t, url+"/metrics")
		attempts = metricSum(t, metrics, "rebound_attempts_total", "flaky:")
		backupAttempts = metricSum(t, metrics, "rebound_attempts_total", "backup:")
		if attempts == 0 {
			t.Fatalf("/metrics counts no attempt to flaky:\n%s", metrics)
		}
		settled := fmt.Sprintf(`(() => {
			const a = document.querySelector('tr[data-upstream="flaky"]'), b = document.querySelector('tr[data-upstream="backup"]');
			return +a.querySelector('.attempts').textContent === %d && +b.querySelector('.attempts').textContent === %d && +a.querySelector('.inflight').textContent === 0;
		})()`, attempts, backupAttempts)
		_, err := chromedp.Run(step(3*time.Second), chromedp.Poll[bool](settled))
		if err == nil {
			break
		}
		if try == 4 {
			t.Fatalf("the page shows %+v, /metrics %d attempts to flaky and %d to backup: %v", rows(), attempts, backupAttempts, err)
		}
	}
	got := rows()["flaky"]
	if got.Breaker != "closed" || !strings.Contains(got.Failures, "transient") || got.Calls == 0 || got.Calls > got.Attempts || got.Cached != "75.0%" ||
		got.Host != flaky.URL || got.GaveUp > got.Calls || got.Broken != 0 {
		t.Errorf("flaky's row: %+v", got)
	}
	if backup := rows()["backup"]; backup.Cached != "–" {
		t.Errorf("backup's answers report no usage, and its row shows %q of its input read from the cache", backup.Cached)
	}
	for name, r := range rows() {
		if r.First+r.AfterRetries+r.GaveUp != r.Calls {
			t.Errorf("%s: %d calls, but %d answered at once, %d after retries, %d given up", name, r.Calls, r.First, r.AfterRetries, r.GaveUp)
		}
	}
	if got.AfterRetries == 0 || got.First == 0 {
		t.Errorf("flaky fails one attempt in 4: some calls should be answered at once and some after retries: %+v", got)
	}
	drawn := charts(t, step)
	for name, r := range rows() {
		c := drawn[name]
		if c.Points["calls"] != 30 || c.Points["retries"] != 30 || c.Points["gaveup"] != 30 || c.Ticks != 30 {
			t.Errorf("%s's chart: %+v, want three lines of 30 points and 30 minute ticks", name, c)
		}
		if (c.Raised["calls"] > 0) != (r.Calls > 0) || !strings.Contains(c.Title, fmt.Sprintf(": %d calls,", r.Calls)) {
			t.Errorf("%s's chart: %+v, want its %d calls drawn", name, c, r.Calls)
		}
	}
	if c := drawn["flaky"]; c.Raised["retries"] == 0 {
		t.Errorf("flaky's chart draws no retry: %+v", c)
	}
	text, err := chromedp.Run(step(5*time.Second), chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		t.Fatal(err)
	}
	failures, _ := chromedp.Run(step(5*time.Second), chromedp.Evaluate[int](`document.querySelectorAll("#failures tbody tr td.kind").length`))
	if failures == 0 || !strings.Contains(text, "503") {
		t.Errorf("the page lists %d last failures:\n%s", failures, text)
	}
	for _, secret := range []string{upstreamKey, prompt} {
		if strings.Contains(text, secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("%q is on the page or in the log", secret)
		}
	}
	if strings.Contains(text, "busy") {
		t.Errorf("the page shows an upstream's answer")
	}
	t.Logf("the page after the load:\n%s", text)

	requested := ui.requests()
	polls, loads := 0, 0
	for _, u := range requested {
		switch {
		case u == url+"/ui/status":
			polls++
		case u == url+"/ui":
			loads++
		case strings.HasPrefix(u, "data:"):
		default:
			t.Errorf("the page requested %s: not the proxy's status", u)
		}
	}
	if polls < 2 || loads != 1 {
		t.Errorf("the page was loaded %d times and polled its status %d times, want once and at least twice", loads, polls)
	}
	t.Logf("%d requests from the page, %d of them polls; %d attempts to flaky, %d to backup", len(requested), polls, attempts, backupAttempts)

	// A config version comes with a reload, which this run has not:
	// the same page, its JSON given.
	resp, page := get(t, url+"/ui")
	// A pool of two keys, whose chart adds theirs up: each key had a
	// call at 03:40, retried once, and the second key gave one up.
	minutes := func(gaveUp int) string {
		var m []string
		for i := range 30 {
			calls, retries := 0, 0
			if i == 10 {
				calls, retries = 1, 1
			}
			m = append(m, fmt.Sprintf(`{"minute":"2026-12-02T03:%02d:00Z","calls":%d,"retries":%d,"gave_up":%d}`, 31+i-1, calls, retries, min(calls, gaveUp)))
		}
		return "[" + strings.Join(m, ",") + "]"
	}
	row := func(key string, gaveUp int) string {
		return `{"upstream":"pool","key":"` + key + `","breaker":"closed","failures":{},"per_minute":` + minutes(gaveUp) + `}`
	}
	canned := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", resp.Header.Get("Content-Security-Policy"))
		if r.URL.Path == "/ui/status" {
			io.WriteString(w, `{"now":"2026-12-02T04:00:00Z","window_seconds":300,"config_version":"v7","upstreams":[`+row("K1", 0)+`,`+row("K2", 1)+`],"tenants":[],"failures":[]}`)
			return
		}
		io.WriteString(w, page)
	}))
	defer canned.Close()
	if err := chromedp.Do(browser, chromedp.Navigate(canned.URL+"/ui")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(step(5*time.Second), chromedp.Poll[bool](`document.getElementById("meta").textContent.includes("config v7")`)); err != nil {
		t.Errorf("the page does not show the config version: %v", err)
	}
	pool := charts(t, step)["pool"]
	if len(charts(t, step)) != 1 || pool.Title != "pool over the last 30 minutes: 2 calls, 2 retries, 1 given up" ||
		pool.Raised["calls"] != 1 || pool.Raised["retries"] != 1 || pool.Raised["gaveup"] != 1 {
		t.Errorf("the chart of a pool of two keys: %+v", pool)
	}
}

// metricSum adds up the samples of the counter name whose rebound_target
// starts with prefix.
func metricSum(t *testing.T, metrics, name, prefix string) int64 {
	t.Helper()
	var sum int64
	re := regexp.MustCompile(`(?m)^` + name + `\{([^}]*)\} ([0-9.e+]+)$`)
	for _, m := range re.FindAllStringSubmatch(metrics, -1) {
		if strings.Contains(m[1], `rebound_target="`+prefix) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err != nil {
				t.Fatalf("%s: %v", m[0], err)
			}
			sum += int64(v)
		}
	}
	return sum
}

// TestProxyAdminTokenFlag: --admin-token-env opens /metrics and /ui to a
// request from beyond the machine with that token and not with a client
// token; an unset variable, or a token that is also a client token, is
// bad usage in one line that echoes no token; bound beyond loopback
// without it, the proxy says at start that the pages are off to others.
func TestProxyAdminTokenFlag(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	const admin, client = "adm-flag-token-4b1f", "tok-flag-client-0c9e"
	t.Setenv("TEST_ADMIN_TOKEN", admin)
	t.Setenv("TEST_CLIENT_TOKENS", client)
	t.Setenv("TEST_UPSTREAM_KEY", "sk-upstream-flag-key")
	url, logs, _ := startProxy(t, "--upstream", up.URL, "--key-env", "TEST_UPSTREAM_KEY", "--token-env", "TEST_CLIENT_TOKENS", "--admin-token-env", "TEST_ADMIN_TOKEN")
	for token, want := range map[string]int{admin: 200, client: 401, "": 401} {
		for _, path := range []string{"/metrics", "/ui/status"} {
			header := []string{"X-Forwarded-For", "198.51.100.4"}
			if token != "" {
				header = append(header, "Authorization", "Bearer "+token)
			}
			if status, _, body := send(t, "GET", url+path, "", "", header...); status != want {
				t.Errorf("%s through a server in front, token %q: %d %s, want %d", path, token, status, body, want)
			}
		}
	}
	if strings.Contains(logs.String(), admin) {
		t.Errorf("the admin token is in the log")
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--admin-token-env", "TEST_UNSET_ADMIN"}, "rebound proxy: --admin-token-env: environment variable TEST_UNSET_ADMIN is not set\n"},
		{[]string{"--admin-token-env", "TEST_CLIENT_TOKENS", "--token-env", "TEST_CLIENT_TOKENS", "--key-env", "TEST_UPSTREAM_KEY"}, "rebound proxy: the admin token (--admin-token-env) is also a client token: a client could open /metrics and the status page\n"},
	} {
		var stdout, stderr lockedBuffer
		code := runProxy(t.Context(), append([]string{"--addr", "127.0.0.1:0", "--upstream", up.URL}, c.args...), &stdout, &stderr)
		if code != 2 || stderr.String() != c.want {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- runProxy(ctx, []string{"--addr", "0.0.0.0:0", "--upstream", up.URL, "--key-env", "TEST_UPSTREAM_KEY", "--token-env", "TEST_CLIENT_TOKENS"}, pw, &stderr)
		pw.Close()
	}()
	line, _ := bufio.NewReader(pr).ReadString('\n')
	cancel()
	go io.Copy(io.Discard, pr)
	if code := <-done; code != 0 || !strings.HasPrefix(line, "listening on ") {
		t.Fatalf("beyond loopback: exit %d, first line %q, stderr %s", code, line, stderr.String())
	}
	if !strings.Contains(stderr.String(), `"msg":"/ui and /metrics are off beyond this machine`) {
		t.Errorf("beyond loopback without an admin token, nothing said at start:\n%s", stderr.String())
	}
}

// statusPage is the proxy's /ui open in a headless Chromium, and every
// request the page has made.
type statusPage struct {
	t         *testing.T
	browser   context.Context
	mu        sync.Mutex // guards requested
	requested []string
}

// openStatusPage opens url's /ui in the Chromium at browserPath, in a
// window of 1280 by height pixels, with a profile, home and temporary
// folder of t's (chromium.Home); the browser closes when t ends, before
// they are removed.
func openStatusPage(t *testing.T, browserPath, url string, height int) *statusPage {
	p := &statusPage{t: t}
	env, profile := chromium.Home(t)
	alloc, cancelAlloc := chromedp.NewExecAllocator(t.Context(),
		append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browserPath), chromedp.NoSandbox,
			chromedp.Flag("disable-gpu", true), chromedp.WindowSize(1280, height),
			chromedp.UserDataDir(profile), chromedp.Env(env...))...)
	t.Cleanup(cancelAlloc)
	browser, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithListener(func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			p.mu.Lock()
			p.requested = append(p.requested, e.Request.URL)
			p.mu.Unlock()
		}
	}))
	t.Cleanup(cancelBrowser)
	p.browser = browser
	if err := chromedp.Do(browser, chromedp.Navigate(url+"/ui")); err != nil {
		t.Fatalf("opening %s/ui: %v", url, err)
	}
	return p
}

// step returns the context of one browser action that may take d.
func (p *statusPage) step(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(p.browser, d)
	p.t.Cleanup(cancel)
	return ctx
}

// requests returns the URLs the page has requested so far.
func (p *statusPage) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.requested)
}
