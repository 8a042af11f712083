package proxy_test

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/proxy"
)

// liveProxy serves whichever Proxy was stored last, as rebound proxy does
// across reloads.
type liveProxy struct{ atomic.Pointer[proxy.Proxy] }

func (l *liveProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.Load().ServeHTTP(w, r) }

// serveLive serves a Proxy made with o on loopback, and returns it, and
// what serves it.
func serveLive(t *testing.T, o proxy.Options) (*httptest.Server, *liveProxy) {
	t.Helper()
	o.Logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	p, err := proxy.New(o)
	if err != nil {
		t.Fatal(err)
	}
	live := &liveProxy{}
	live.Store(p)
	front := httptest.NewServer(live)
	t.Cleanup(front.Close)
	return front, live
}

// reload replaces live's Proxy with one for the config js.
func reload(t *testing.T, live *liveProxy, js string, env map[string]string) {
	t.Helper()
	q, err := live.Load().Reload(config(t, js, env))
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	live.Store(q)
}

func TestReloadKeepsATenantOverItsCapRefused(t *testing.T) {
	up, seen := usageUpstream(t, 20, 1000)
	env := tenantEnv
	front, live := serveLive(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "0.05", ""), env), Getenv: mapEnv(env)})
	chatAs := func(token string) int {
		resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer "+token)
		return resp.StatusCode
	}
	// Each request costs $0.0102: four fit in $0.05.
	for i := range 4 {
		if s := chatAs("tok-capped-1"); s != 200 {
			t.Fatalf("request %d: %d", i+1, s)
		}
	}
	// Another config, the cap the same: the spend so far holds.
	reload(t, live, tenantConfig(up.URL, "openai", "0.05", `,"requests_per_minute":1000`), env)
	if s := chatAs("tok-capped-1"); s != http.StatusTooManyRequests {
		t.Fatalf("after a reload, a tenant over its cap got %d, want 429: the reload reset its spend", s)
	}
	// A cap raised by a cent: one more request ($0.0408 + $0.0102 ≤ $0.06), not five.
	reload(t, live, tenantConfig(up.URL, "openai", "0.06", ""), env)
	if s := chatAs("tok-capped-2"); s != 200 {
		t.Fatalf("under the raised cap: %d, want 200", s)
	}
	if s := chatAs("tok-capped-2"); s != http.StatusTooManyRequests {
		t.Fatalf("past the raised cap: %d, want 429: the raised cap started from nothing", s)
	}
	if seen.hits != 5 {
		t.Errorf("upstream saw %d requests, want 5", seen.hits)
	}
	counted := false
	for _, tn := range liveStatus(t, front).Tenants {
		if tn.Name == "capped" {
			counted = tn.Requests == 7 && tn.Refused == 2
			if !counted {
				t.Errorf("status: tenant capped has %d requests, %d refused; want 7 and 2, counted across reloads", tn.Requests, tn.Refused)
			}
		}
	}
	if !counted {
		t.Errorf("status shows no tenant capped")
	}
}

func TestRequestInFlightAcrossAReloadFinishesAndCountsToItsTenant(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		close(arrived)
		<-release
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":20,"completion_tokens":1000}}`)
	})
	front, live := serveLive(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "0.05", ""), tenantEnv), Getenv: mapEnv(tenantEnv)})
	answered := make(chan int, 1)
	go func() {
		resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-capped-1")
		answered <- resp.StatusCode
	}()
	<-arrived
	// The new config drops the upstream's route: the request in flight
	// still finishes on the config it started with.
	other, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	reload(t, live, tenantConfig(other.URL, "openai", "0.05", ""), tenantEnv)
	close(release)
	if s := <-answered; s != 200 {
		t.Fatalf("the request in flight across the reload got %d, want 200", s)
	}
	shown := false
	for _, tn := range liveStatus(t, front).Tenants {
		shown = shown || tn.Name == "capped"
		if tn.Name == "capped" && (tn.Requests != 1 || math.Abs(tn.SpentUSD-0.0102) > 1e-9) {
			t.Errorf("after the reload the tenant shows %d requests and $%g, want 1 and $0.0102: the request in flight counted elsewhere", tn.Requests, tn.SpentUSD)
		}
	}
	if !shown {
		t.Errorf("the status page shows no tenant capped")
	}
	if _, err := live.Load().Reload(nil); err == nil {
		t.Errorf("Reload(nil) did not fail")
	}
}

func TestRequestInFlightWhenACapChangesCountsAgainstTheNewCap(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up, seen := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			close(arrived)
			<-release
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"c","choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"prompt_tokens":20,"completion_tokens":1000}}`)
	})
	front, live := serveLive(t, proxy.Options{Config: config(t, tenantConfig(up.URL, "openai", "0.05", ""), tenantEnv), Getenv: mapEnv(tenantEnv)})
	chatAs := func() int {
		resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", chatBody, "Authorization", "Bearer tok-capped-1")
		return resp.StatusCode
	}
	answered := make(chan int, 1)
	go func() { answered <- chatAs() }()
	<-arrived
	// $0.06 holds five requests of $0.0102: the one in flight, held on
	// the old cap, and four more.
	reload(t, live, tenantConfig(up.URL, "openai", "0.06", ""), tenantEnv)
	for i := range 4 {
		if s := chatAs(); s != 200 {
			t.Fatalf("request %d under the new cap: %d", i+1, s)
		}
	}
	if s := chatAs(); s != http.StatusTooManyRequests {
		t.Errorf("a sixth request: %d, want 429: the request in flight at the reload was not counted against the new cap", s)
	}
	close(release)
	if s := <-answered; s != 200 {
		t.Errorf("the request in flight: %d", s)
	}
	if seen.hits != 5 {
		t.Errorf("upstream saw %d requests, want 5", seen.hits)
	}
}

// reloadStatus is what these tests read of /ui/status.
type reloadStatus struct {
	ConfigVersion string `json:"config_version"`
	Upstreams     []struct {
		Upstream string `json:"upstream"`
		Breaker  string `json:"breaker"`
		Calls    int64  `json:"calls"`
	} `json:"upstreams"`
	Tenants []struct {
		Name     string  `json:"name"`
		Requests int64   `json:"requests"`
		Refused  int64   `json:"refused"`
		SpentUSD float64 `json:"spent_usd"`
	} `json:"tenants"`
}

func liveStatus(t *testing.T, front *httptest.Server) reloadStatus {
	t.Helper()
	resp, body := do(t, "GET", front.URL+proxy.StatusJSONPath, "")
	if resp.StatusCode != 200 {
		t.Fatalf("%s: %d %s", proxy.StatusJSONPath, resp.StatusCode, body)
	}
	var s reloadStatus
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("%s: %v: %s", proxy.StatusJSONPath, err, body)
	}
	return s
}

// twoUpstreams is a config of upstream a (route /a) and, if withB,
// upstream b (route /b); a falls back to b when fallback says so.
func twoUpstreams(aURL, bURL string, withB, fallback bool) string {
	js := `{"upstreams":{"a":{"url":"` + aURL + `"}`
	if withB {
		js += `,"b":{"url":"` + bURL + `"}`
	}
	js += `},"routes":[{"path_prefix":"/a","upstream":"a"`
	if fallback {
		js += `,"fallbacks":[{"upstream":"b"}]`
	}
	js += `}`
	if withB {
		js += `,{"path_prefix":"/b","upstream":"b"}`
	}
	return js + `]}`
}

func TestReloadKeepsAnOpenBreakerAndDropsARemovedUpstream(t *testing.T) {
	dead, deadSeen := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(503) })
	fine, fineSeen := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	one := rebound.Policy{MaxAttempts: 1}
	front, live := serveLive(t, proxy.Options{Config: config(t, twoUpstreams(dead.URL, fine.URL, false, false), nil), Policy: &one,
		Breaker: func(key string) rebound.Breaker {
			return breaker.New(key, breaker.Config{ConsecutiveFailures: 1, Cooldown: 1 << 40})
		}})
	do(t, "POST", front.URL+"/a/v1/chat/completions", `{"model":"m"}`) // opens a's breaker
	// b added: a's breaker stays open, b starts closed.
	reload(t, live, twoUpstreams(dead.URL, fine.URL, true, false), nil)
	before := deadSeen.hits
	if _, body := do(t, "POST", front.URL+"/a/v1/chat/completions", `{"model":"m"}`); !strings.Contains(body, "circuit open") {
		t.Errorf("after a reload, a's open breaker let a call through: %s", body)
	}
	if deadSeen.hits != before {
		t.Errorf("after a reload, the dead upstream was called again")
	}
	if resp, body := do(t, "POST", front.URL+"/b/v1/chat/completions", `{"model":"m"}`); resp.StatusCode != 200 || fineSeen.hits != 1 {
		t.Errorf("the added upstream: %d %s, %d hits", resp.StatusCode, body, fineSeen.hits)
	}
	// b removed: it is gone from the status page, and its route with it.
	reload(t, live, twoUpstreams(dead.URL, fine.URL, false, false), nil)
	ups := liveStatus(t, front).Upstreams
	if len(ups) != 1 || ups[0].Upstream != "a" || ups[0].Breaker != "open" {
		t.Errorf("status shows %+v, want only upstream a, its breaker open (b removed)", ups)
	}
	if resp, _ := do(t, "POST", front.URL+"/b/v1/chat/completions", `{"model":"m"}`); resp.StatusCode != 404 || fineSeen.hits != 1 {
		t.Errorf("the removed upstream's route: %d, %d hits", resp.StatusCode, fineSeen.hits)
	}
	// a at another URL is another endpoint: its breaker starts closed.
	reload(t, live, twoUpstreams(fine.URL, dead.URL, false, false), nil)
	if resp, body := do(t, "POST", front.URL+"/a/v1/chat/completions", `{"model":"m"}`); resp.StatusCode != 200 {
		t.Errorf("a moved to a live URL: %d %s, want 200 from a fresh breaker", resp.StatusCode, body)
	}
}

func TestReloadKeepsAQuotaCooldown(t *testing.T) {
	broke, brokeSeen := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		io.WriteString(w, `{"error":{"type":"insufficient_quota","code":"insufficient_quota","message":"quota"}}`)
	})
	fine, fineSeen := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	front, live := serveLive(t, proxy.Options{Config: config(t, twoUpstreams(broke.URL, fine.URL, true, true), nil)})
	if resp, body := do(t, "POST", front.URL+"/a/v1/chat/completions", `{"model":"m"}`); resp.StatusCode != 200 || brokeSeen.hits != 1 {
		t.Fatalf("first request: %d %s, a saw %d", resp.StatusCode, body, brokeSeen.hits)
	}
	reload(t, live, twoUpstreams(broke.URL, fine.URL, true, true)+"\n", nil)
	if resp, body := do(t, "POST", front.URL+"/a/v1/chat/completions", `{"model":"m"}`); resp.StatusCode != 200 {
		t.Fatalf("after a reload: %d %s", resp.StatusCode, body)
	}
	if brokeSeen.hits != 1 || fineSeen.hits != 2 {
		t.Errorf("after a reload, the upstream out of quota saw %d requests (want 1) and its fallback %d (want 2): its cool-down was forgotten", brokeSeen.hits, fineSeen.hits)
	}
}

func TestReloadRefusesABadConfigAndTheOldOneStays(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { io.WriteString(w, `{}`) })
	js := `{"upstreams":{"u":{"url":"` + up.URL + `"}}}`
	front, live := serveLive(t, proxy.Options{Config: config(t, js, nil), Tokens: []string{"tok"}})
	old := live.Load()
	// Valid JSON that the proxy, not the parser, refuses: a client's key
	// passed on, with client tokens.
	_, err := old.Reload(config(t, `{"upstreams":{"u":{"url":"`+up.URL+`"}},"pass_client_key":true}`, nil))
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "pass_client_key") {
		t.Fatalf("a bad config: error %v, want one line naming pass_client_key", err)
	}
	if resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{}`, "Authorization", "Bearer tok"); resp.StatusCode != 200 {
		t.Errorf("after a refused reload the old proxy answers %d", resp.StatusCode)
	}
	made, err := proxy.New(proxy.Options{Upstream: up.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := made.Reload(config(t, js, nil)); !errors.Is(err, proxy.ErrNoConfig) {
		t.Errorf("reloading a proxy made without a config: %v, want ErrNoConfig", err)
	}
}

func TestReloadShowsTheNewConfigVersion(t *testing.T) {
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	js := `{"upstreams":{"u":{"url":"` + up.URL + `"}}}`
	front, live := serveLive(t, proxy.Options{Config: config(t, js, nil)})
	first := live.Load().ConfigVersion()
	if !regexp.MustCompile(`^[0-9a-f]{12}$`).MatchString(first) {
		t.Fatalf("version %q is not 12 hex digits", first)
	}
	reload(t, live, js+" ", nil)
	second := live.Load().ConfigVersion()
	shown := liveStatus(t, front).ConfigVersion
	if second == first || !strings.HasPrefix(shown, second+", loaded ") {
		t.Errorf("versions %q then %q; status shows %q", first, second, shown)
	}
}

// BenchmarkReload measures a reload of a config of a tenant with a cap
// and one upstream, the state carried over.
func BenchmarkReload(b *testing.B) {
	b.ReportAllocs()
	c, err := proxy.ParseConfig([]byte(tenantConfig("http://127.0.0.1:1", "openai", "0.05", "")), mapEnv(tenantEnv))
	if err != nil {
		b.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Config: c, Getenv: mapEnv(tenantEnv), Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if p, err = p.Reload(c); err != nil {
			b.Fatal(err)
		}
	}
}
