package proxy_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/proxy"
)

const adminToken = "adm-token-7f3a9c21e8"

// status is the JSON the status page polls, as the page reads it.
type status struct {
	Upstreams []struct {
		Upstream, Key, Breaker string
		Host                   string
		InFlight               int64 `json:"in_flight"`
		Calls, Attempts        int64
		GaveUp                 int64 `json:"gave_up"`
		Broken                 int64
		RetryRate              float64 `json:"retry_rate"`
		Failures               map[string]int64
		P50Ms                  *float64 `json:"p50_ms"`
		P99Ms                  *float64 `json:"p99_ms"`
		RequestsHeadroom       *float64 `json:"requests_headroom"`
	}
	Tenants  []json.RawMessage
	Failures []struct {
		Route, Upstream, Key, Kind string
		Status                     int
		Time                       time.Time
	}
}

// inMemory serves r on h as a request from beyond the machine: it has
// no loopback local address.
func inMemory(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 8080})))
	return w
}

// readStatus reads the status JSON of p with the admin token.
func readStatus(t *testing.T, p http.Handler) (status, string) {
	t.Helper()
	r := httptest.NewRequest("GET", "http://localhost/ui/status", nil)
	r.Header.Set("Authorization", "Bearer "+adminToken)
	w := inMemory(p, r)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("/ui/status: %d %s", w.Code, w.Body)
	}
	var s status
	if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
		t.Fatalf("/ui/status: %v: %s", err, w.Body)
	}
	return s, w.Body.String()
}

// call sends a chat completion to p in memory and reads the answer.
func call(t *testing.T, p http.Handler) int {
	t.Helper()
	r := httptest.NewRequest("POST", "http://localhost/v1/chat/completions", strings.NewReader(`{"model":"gpt-x"}`))
	w := httptest.NewRecorder()
	p.ServeHTTP(w, r)
	return w.Code
}

// TestStatusFiguresCoverTheLastFiveMinutes: the status page counts each
// call to an upstream, its attempts, whether it was retried, the kind of
// each failed attempt and its latency, over the last five minutes; the
// last failures stay listed after the window has moved on, with their
// route, kind and status and nothing of the upstream's answer.
func TestStatusFiguresCoverTheLastFiveMinutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			time.Sleep(40 * time.Millisecond) // the upstream's own time
			status, body := 200, `{"choices":[]}`
			if n.Add(1)%2 == 1 {
				status, body = 503, `{"error":{"message":"try again, key `+operatorKey+`"}}`
			}
			return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
		})
		policy := proxy.RecommendedPolicy()
		policy.BaseDelay, policy.Jitter = 10*time.Millisecond, rebound.JitterNone
		p, err := proxy.New(proxy.Options{Upstream: "http://upstream.invalid", UpstreamKey: operatorKey, Base: base,
			Policy: &policy, AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if code := call(t, p); code != 200 {
				t.Fatalf("call: %d", code)
			}
		}
		s, raw := readStatus(t, p)
		if len(s.Upstreams) != 1 {
			t.Fatalf("upstreams: %s", raw)
		}
		u := s.Upstreams[0]
		if u.Upstream != "upstream" || u.Key != "" || u.Breaker != "closed" || u.Calls != 5 || u.Attempts != 10 || u.RetryRate != 1 ||
			u.InFlight != 0 || len(u.Failures) != 1 || u.Failures["transient"] != 5 || u.RequestsHeadroom != nil {
			t.Errorf("after 5 calls retried once each: %s", raw)
		}
		// Each call took 40 ms, a 10 ms wait, and 40 ms again.
		if u.P50Ms == nil || *u.P50Ms < 90 || *u.P50Ms > 90*1.2 || *u.P99Ms < *u.P50Ms {
			t.Errorf("latency: p50 %v p99 %v ms, want p50 within 20%% above 90", u.P50Ms, u.P99Ms)
		}
		if len(s.Failures) != 5 {
			t.Fatalf("last failures: %s", raw)
		}
		for _, f := range s.Failures {
			if f.Route != "default" || f.Upstream != "upstream" || f.Kind != "transient" || f.Status != 503 || f.Time.IsZero() {
				t.Errorf("failure %+v", f)
			}
		}
		if strings.Contains(raw, operatorKey) || strings.Contains(raw, "try again") {
			t.Errorf("the status carries the upstream's answer: %s", raw)
		}

		time.Sleep(4 * time.Minute)
		if s, raw = readStatus(t, p); s.Upstreams[0].Calls != 5 {
			t.Errorf("4 minutes on: %s", raw)
		}
		if code := call(t, p); code != 200 {
			t.Fatalf("call: %d", code)
		}
		time.Sleep(2 * time.Minute) // 6 minutes after the first 5 calls, 2 after the last
		s, raw = readStatus(t, p)
		if u := s.Upstreams[0]; u.Calls != 1 || u.Attempts != 2 || u.Failures["transient"] != 1 || u.P50Ms == nil {
			t.Errorf("6 minutes on, the first 5 calls should have left the window: %s", raw)
		}
		if len(s.Failures) != 6 {
			t.Errorf("the last failures should outlive the window: %d listed", len(s.Failures))
		}
		time.Sleep(6 * time.Minute)
		s, raw = readStatus(t, p)
		if u := s.Upstreams[0]; u.Calls != 0 || u.Attempts != 0 || len(u.Failures) != 0 || u.P50Ms != nil || u.RetryRate != 0 {
			t.Errorf("after 6 quiet minutes: %s", raw)
		}
	})
}

// TestStatusCountsAStreamInFlightUntilItEnds: a request whose answer is
// still being read counts as in flight to its upstream until it ends.
func TestStatusCountsAStreamInFlightUntilItEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			body := &gatedBody{first: "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n", gate: release}
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: body, Request: r}, nil
		})
		p, err := proxy.New(proxy.Options{Upstream: "http://upstream.invalid", Base: base, AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan int)
		go func() { done <- call(t, p) }()
		synctest.Wait()
		if s, raw := readStatus(t, p); s.Upstreams[0].InFlight != 1 {
			t.Errorf("while the stream goes on: %s", raw)
		}
		close(release)
		<-done
		if s, raw := readStatus(t, p); s.Upstreams[0].InFlight != 0 || s.Upstreams[0].Calls != 1 {
			t.Errorf("after the stream: %s", raw)
		}
	})
}

// gatedBody gives first, then waits for gate to close before its end.
type gatedBody struct {
	first string
	gate  chan struct{}
	sent  bool
}

func (b *gatedBody) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, b.first), nil
	}
	<-b.gate
	return 0, io.EOF
}

func (b *gatedBody) Close() error { return nil }

// TestStatusPageAndMetricsOpenOnlyToThisMachineOrTheAdminToken: on a
// loopback connection for a loopback host name, the status page and
// /metrics are open; from elsewhere (another address, a foreign Host, a
// server in front) they need the admin token, as a bearer token or a
// Basic password, and a client token does not open them; without an
// admin token they are refused with a reason. The admin token is no
// client token, and none is echoed.
func TestStatusPageAndMetricsOpenOnlyToThisMachineOrTheAdminToken(t *testing.T) {
	const client = "tok-client-5d2e8a"
	up, _ := recordingUpstream(t, func(w http.ResponseWriter, r *http.Request, n int) { w.Write([]byte(`{}`)) })
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "rebound_attempts_total 1\n") })
	for _, admin := range []string{"", adminToken} {
		o := proxy.Options{Upstream: up.URL, UpstreamKey: operatorKey, Tokens: []string{client}, AdminToken: admin, Metrics: metrics}
		front, logs := serveProxy(t, o)
		p, err := proxy.New(o)
		if err != nil {
			t.Fatal(err)
		}
		basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("anyone:"+adminToken))
		for _, path := range []string{"/ui", "/ui/status", "/metrics"} {
			// From this machine: open, with or without tokens.
			if resp, body := do(t, "GET", front.URL+path, ""); resp.StatusCode != 200 || body == "" {
				t.Errorf("admin %q, %s from loopback: %d %s", admin, path, resp.StatusCode, body)
			}
			for _, c := range []struct {
				name, host string
				header     []string
				want       int // with the admin token set; 403 without
			}{
				{"foreign Host", "rebound.attacker.example", nil, 401},
				{"through a server in front", "", []string{"X-Forwarded-For", "203.0.113.9"}, 401},
				{"a client token", "", []string{"X-Forwarded-For", "203.0.113.9", "Authorization", "Bearer " + client}, 401},
				{"a wrong admin token", "", []string{"X-Forwarded-For", "203.0.113.9", "Authorization", "Bearer " + adminToken + "x"}, 401},
				{"the admin token", "", []string{"X-Forwarded-For", "203.0.113.9", "Authorization", "Bearer " + adminToken}, 200},
				{"the admin token as a Basic password", "rebound.example", []string{"Authorization", basic}, 200},
			} {
				want := c.want
				if admin == "" {
					want = 403
				}
				resp, body := doHost(t, c.host, "GET", front.URL+path, "", c.header...)
				if resp.StatusCode != want {
					t.Errorf("admin %q, %s, %s: %d %s, want %d", admin, path, c.name, resp.StatusCode, body, want)
				}
				if want == 401 && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
					t.Errorf("%s, %s: a 401 without a Basic challenge: the browser would not ask", path, c.name)
				}
				if want != 200 && (strings.Count(body, "\n") > 1 || !strings.Contains(body, "admin token")) {
					t.Errorf("%s, %s: want a one-line reason naming the admin token: %s", path, c.name, body)
				}
				if strings.Contains(body, adminToken) || strings.Contains(body, client) {
					t.Errorf("%s, %s: a token echoed: %s", path, c.name, body)
				}
			}
			// From another address, in memory: only the admin token.
			r := httptest.NewRequest("GET", "http://localhost"+path, nil)
			if w := inMemory(p, r); w.Code == 200 {
				t.Errorf("admin %q, %s from 10.0.0.7: 200", admin, path)
			}
		}
		// The admin token is no client token.
		resp, _ := do(t, "POST", front.URL+"/v1/chat/completions", `{"model":"m"}`, "Authorization", "Bearer "+adminToken)
		if resp.StatusCode != 401 {
			t.Errorf("a model call with the admin token: %d, want 401", resp.StatusCode)
		}
		if strings.Contains(logs.String(), adminToken) || strings.Contains(logs.String(), client) {
			t.Errorf("a token in the log: %s", logs)
		}
	}
	if _, err := proxy.New(proxy.Options{Upstream: up.URL, UpstreamKey: operatorKey, Tokens: []string{client, " " + adminToken}, AdminToken: adminToken}); err == nil ||
		!strings.Contains(err.Error(), "admin token") || strings.Contains(err.Error(), adminToken) {
		t.Errorf("an admin token that is also a client token: %v", err)
	}
}

// TestStatusPageLoadsNothingFromElsewhere: the page is served with a
// Content-Security-Policy that lets it load nothing but its own inline
// style and script and fetch nothing but its own origin, and refuses
// framing; it takes GET only.
func TestStatusPageLoadsNothingFromElsewhere(t *testing.T) {
	front, _ := serveProxy(t, proxy.Options{Upstream: "http://upstream.invalid"})
	resp, body := do(t, "GET", front.URL+"/ui", "")
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.HasPrefix(csp, "default-src 'none'; style-src 'sha256-") || !strings.Contains(csp, "connect-src 'self'") ||
		!strings.Contains(csp, "frame-ancestors 'none'") || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("/ui: %d %v", resp.StatusCode, resp.Header)
	}
	for _, s := range []string{"http:", "https:", "src=", "@import", "url("} {
		if strings.Contains(body, s) {
			t.Errorf("the page names something elsewhere: %q", s)
		}
	}
	if strings.Count(body, "href=") != 1 || !strings.Contains(body, `href="data:,"`) {
		t.Errorf("the page links something besides its empty icon")
	}
	if resp, _ := do(t, "POST", front.URL+"/ui", "x"); resp.StatusCode != 405 {
		t.Errorf("POST /ui: %d, want 405", resp.StatusCode)
	}
	if resp, _ := do(t, "GET", front.URL+"/ui/", ""); resp.StatusCode != 301 || resp.Header.Get("Location") != "/ui" {
		t.Errorf("GET /ui/: %d %v, want a redirect to /ui", resp.StatusCode, resp.Header)
	}
	if resp, body := do(t, "GET", front.URL+"/ui/other", ""); resp.StatusCode != 404 || !strings.Contains(body, "/ui") {
		t.Errorf("GET /ui/other: %d %s, want the proxy's own 404", resp.StatusCode, body)
	}
}

// TestStatusShowsTheWorstBreakerOfAnUpstream: an upstream whose breaker
// of one model opened shows "open" though another model of it answers,
// while another upstream stays "closed" and is listed though nothing
// called it.
func TestStatusShowsTheWorstBreakerOfAnUpstream(t *testing.T) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		body, _ := io.ReadAll(r.Body)
		status := 200
		if strings.Contains(string(body), "m1") {
			status = 503
		}
		return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{}`)), Request: r}, nil
	})
	one := rebound.Policy{MaxAttempts: 1}
	p, err := proxy.New(proxy.Options{
		Config: config(t, `{"upstreams":{"a":{"url":"http://a.invalid"},"b":{"url":"http://b.invalid"}},
			"routes":[{"model":"m1","upstream":"a"},{"model":"m2","upstream":"a"},{"upstream":"b"}]}`, nil),
		Base: base, Policy: &one, AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler),
		Breaker: func(key string) rebound.Breaker {
			return breaker.New(key, breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Hour})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, model := range []string{"m1", "m2", "m2"} {
		r := httptest.NewRequest("POST", "http://localhost/v1/chat/completions", strings.NewReader(`{"model":"`+model+`"}`))
		p.ServeHTTP(httptest.NewRecorder(), r)
	}
	s, raw := readStatus(t, p)
	if len(s.Upstreams) != 2 || s.Upstreams[0].Upstream != "a" || s.Upstreams[0].Breaker != "open" || s.Upstreams[0].Calls != 3 ||
		s.Upstreams[1].Upstream != "b" || s.Upstreams[1].Breaker != "closed" || s.Upstreams[1].Calls != 0 {
		t.Errorf("%s", raw)
	}
}

// TestStatusShowsTheShareOfInputReadFromTheCache: each key of a pool, and
// each tenant, shows the tokens its answers reported (every input token,
// those read from the provider's cache and written into it, the output)
// and the share of its input read from the cache: a key's over the last
// five minutes, as its other figures, a tenant's since the process
// started, as its requests; null where no input was seen. /metrics counts
// each tenant's tokens by type.
func TestStatusShowsTheShareOfInputReadFromTheCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// K1's answers read most of their input from the cache, K2's none
		// of it; an answer without usage counts nothing.
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			body := `{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":10}}`
			switch {
			case r.Header.Get("Authorization") == "Bearer sk-k1":
				body = `{"choices":[],"usage":{"prompt_tokens":92010,"completion_tokens":10,"prompt_tokens_details":{"cached_tokens":90000}}}`
			case strings.Contains(r.URL.Path, "/v1/embeddings"):
				body = `{"data":[]}`
			}
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
		})
		env := map[string]string{"K1": "sk-k1", "K2": "sk-k2", "A": "tok-a", "B": "tok-b"}
		cfg, err := proxy.ParseConfig([]byte(`{"upstreams":{"pool":{"url":"http://provider.test","keys_env":["K1","K2"]}},
			"tenants":{"a":{"tokens_env":"A"},"b":{"tokens_env":"B"}}}`), func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		var p *proxy.Proxy
		p, err = proxy.New(proxy.Options{Config: cfg, Getenv: func(k string) string { return env[k] }, Base: base, AdminToken: adminToken,
			Metrics: figuresHandler(&p), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		send := func(path string) {
			r := httptest.NewRequest("POST", "http://localhost"+path, strings.NewReader(`{"model":"m"}`))
			r.Header.Set("Authorization", "Bearer tok-a")
			w := httptest.NewRecorder()
			if p.ServeHTTP(w, r); w.Code != 200 {
				t.Fatalf("%s: %d %s", path, w.Code, w.Body)
			}
		}
		for range 6 {
			send("/v1/chat/completions")
		}
		send("/v1/embeddings")
		type tokens struct {
			Input      int64    `json:"input_tokens"`
			CacheRead  int64    `json:"cache_read_tokens"`
			CacheWrite int64    `json:"cache_write_tokens"`
			Output     int64    `json:"output_tokens"`
			Share      *float64 `json:"cache_read_share"`
		}
		read := func() (keys map[string]tokens, tenants map[string]tokens, raw string) {
			_, raw = readStatus(t, p)
			var s struct {
				Upstreams []struct {
					Key string
					tokens
				}
				Tenants []struct {
					Name string
					tokens
				}
			}
			if err := json.Unmarshal([]byte(raw), &s); err != nil {
				t.Fatal(err)
			}
			keys, tenants = map[string]tokens{}, map[string]tokens{}
			for _, u := range s.Upstreams {
				keys[u.Key] = u.tokens
			}
			for _, tn := range s.Tenants {
				tenants[tn.Name] = tn.tokens
			}
			return keys, tenants, raw
		}
		keys, tenants, raw := read()
		k1, k2 := keys["K1"], keys["K2"]
		// Which key took which call is the pool's to say: the figures
		// follow from the calls each key had.
		n1, n2 := k1.Input/92010, k2.Input/1000
		if n1+n2 != 6 || n1 == 0 || k1.Input != n1*92010 || k1.CacheRead != n1*90000 || k1.Output != n1*10 || k1.CacheWrite != 0 ||
			k2.Input != n2*1000 || k2.CacheRead != 0 || k2.Output != n2*10 {
			t.Fatalf("keys' tokens after 6 calls: K1 %+v, K2 %+v\n%s", k1, k2, raw)
		}
		if k1.Share == nil || *k1.Share != 90000.0/92010 {
			t.Errorf("K1's share read from the cache %v, want %v", k1.Share, 90000.0/92010)
		}
		if (n2 == 0) != (k2.Share == nil) || n2 > 0 && *k2.Share != 0 {
			t.Errorf("K2 (%d calls): share read from the cache %v, want 0, or null without a call", n2, k2.Share)
		}
		a := tenants["a"]
		wantA := tokens{Input: n1*92010 + n2*1000, CacheRead: n1 * 90000, Output: 60}
		if a.Input != wantA.Input || a.CacheRead != wantA.CacheRead || a.Output != wantA.Output || a.CacheWrite != 0 ||
			a.Share == nil || *a.Share != float64(wantA.CacheRead)/float64(wantA.Input) {
			t.Errorf("tenant a: %+v, want %+v and a share of %v", a, wantA, float64(wantA.CacheRead)/float64(wantA.Input))
		}
		if b := tenants["b"]; b.Input != 0 || b.Share != nil {
			t.Errorf("tenant b, without a request: %+v, want no tokens and a null share", b)
		}
		if !strings.Contains(raw, `"cache_read_share":null`) {
			t.Errorf("a share not known is not null: %s", raw)
		}
		r := httptest.NewRequest("GET", "http://localhost/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+adminToken)
		page := inMemory(p, r).Body.String()
		for typ, n := range map[string]int64{"input": wantA.Input, "output": 60, "cache_read": wantA.CacheRead, "cache_write": 0} {
			if want := fmt.Sprintf("rebound_proxy_tenant_tokens_total{tenant=\"a\",type=%q} %d\n", typ, n); !strings.Contains(page, want) {
				t.Errorf("/metrics lacks %s%s", want, page)
			}
		}

		time.Sleep(6 * time.Minute)
		keys, tenants, raw = read()
		if k1 := keys["K1"]; k1.Input != 0 || k1.CacheRead != 0 || k1.Output != 0 || k1.Share != nil {
			t.Errorf("6 minutes on, K1's calls should have left the window: %s", raw)
		}
		if a := tenants["a"]; a.Input != wantA.Input || a.Share == nil {
			t.Errorf("6 minutes on, tenant a's tokens since the start should stay: %s", raw)
		}
	})
}

// TestStatusShowsGiveUpsBrokenStreamsAndTheHost: an upstream's row counts
// the calls given up and the answers that broke off after they began,
// and shows where the upstream is by its scheme, host and port, never its
// path.
func TestStatusShowsGiveUpsBrokenStreamsAndTheHost(t *testing.T) {
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if strings.Contains(r.URL.Path, "embeddings") { // never retried: a 400 is the client's
			return &http.Response{StatusCode: 400, Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(strings.NewReader(`{"error":{"message":"bad input"}}`)), Request: r}, nil
		}
		body := io.MultiReader(strings.NewReader("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n"), failingReader{io.ErrUnexpectedEOF})
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}}, Body: io.NopCloser(body), Request: r}, nil
	})
	cfg, err := proxy.ParseConfig([]byte(`{"upstreams":{"far":{"url":"https://provider.test:8443/v1/base"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{Config: cfg, Base: base, AdminToken: adminToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		w := httptest.NewRecorder()
		p.ServeHTTP(w, httptest.NewRequest("POST", "http://localhost/v1/embeddings", strings.NewReader(`{"model":"e"}`)))
		if w.Code != 400 {
			t.Fatalf("a refused call: %d", w.Code)
		}
	}
	// Under an http.Server, the proxy breaks the client's answer as the
	// upstream's broke: the handler panics with http.ErrAbortHandler.
	r := httptest.NewRequest("POST", "http://localhost/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	r = r.WithContext(context.WithValue(r.Context(), http.ServerContextKey, &http.Server{}))
	func() {
		defer func() {
			if v := recover(); v != http.ErrAbortHandler {
				t.Errorf("a stream broken after it began: recovered %v, want http.ErrAbortHandler", v)
			}
		}()
		p.ServeHTTP(httptest.NewRecorder(), r)
	}()
	s, raw := readStatus(t, p)
	if len(s.Upstreams) != 1 {
		t.Fatalf("upstreams: %s", raw)
	}
	if u := s.Upstreams[0]; u.Host != "https://provider.test:8443" || u.Calls != 3 || u.GaveUp != 2 || u.Broken != 1 {
		t.Errorf("after 2 calls given up and a broken stream: %s", raw)
	}
	if strings.Contains(raw, "/v1/base") {
		t.Errorf("the status shows the upstream's path: %s", raw)
	}
}

// failingReader is a reader that fails with its error.
type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }
