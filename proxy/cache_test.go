package proxy_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/internal/memnet"
	"github.com/rebound-go/rebound/proxy"
)

// How a downableUpstream fails while it is down.
const (
	down503     = "503"     // the chaos server's down mode: 503 to every attempt
	downRefused = "refused" // a connection refused, as a closed listener refuses it
	downBreaker = "breaker" // the upstream's breakers open: no attempt made
)

// downableUpstream sends a proxy's attempts to a chaos server in memory,
// answering as an OpenAI provider, until it is made to fail.
type downableUpstream struct {
	tr http.RoundTripper

	mu   sync.Mutex
	down string // "": healthy; else how it fails
	hits int    // requests that reached the chaos server
}

func (f *downableUpstream) fail(how string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = how
}

func (f *downableUpstream) state() (down string, hits int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.down, f.hits
}

func (f *downableUpstream) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	down := f.down
	if down != downRefused {
		f.hits++
	}
	f.mu.Unlock()
	req = req.Clone(req.Context())
	req.Header.Set(chaos.HeaderProfile, chaos.ProfileOpenAI)
	req.Header.Set(chaos.HeaderMode, chaos.ModeOK)
	switch down {
	case downRefused:
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	case down503:
		req.Header.Set(chaos.HeaderMode, chaos.ModeDown)
	}
	return f.tr.RoundTrip(req)
}

// switchBreaker is a breaker that refuses every attempt while its
// upstream's breakers are open (downBreaker).
type switchBreaker struct{ up *downableUpstream }

func (b switchBreaker) Allow() (rebound.Permit, error) {
	if down, _ := b.up.state(); down == downBreaker {
		return 0, errors.New("open")
	}
	return 0, nil
}

func (switchBreaker) Done(rebound.Permit, rebound.Outcome) {}

// cacheBench is a proxy with a cached route in front of a downableUpstream,
// in a synctest bubble, its access log kept.
type cacheBench struct {
	t    *testing.T
	p    *proxy.Proxy
	up   *downableUpstream
	logs *bytes.Buffer
	env  map[string]string
}

// newCacheBench serves the config js (its upstream "u" at
// http://upstream.test) through a proxy in front of a chaos server. Call
// it inside synctest.Test.
func newCacheBench(t *testing.T, js string, env map[string]string) *cacheBench {
	t.Helper()
	srv, err := chaos.New(chaos.Config{Seed: 1, Mode: chaos.ModeOK})
	if err != nil {
		t.Fatal(err)
	}
	tr, stop := memnet.Serve(srv)
	t.Cleanup(stop)
	b := &cacheBench{t: t, up: &downableUpstream{tr: tr}, logs: &bytes.Buffer{}, env: env}
	b.p, err = proxy.New(proxy.Options{Config: config(t, js, env), Getenv: b.getenv, Base: b.up,
		Breaker: func(string) rebound.Breaker { return switchBreaker{b.up} },
		Logger:  slog.New(slog.NewJSONHandler(b.logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func (b *cacheBench) getenv(k string) string { return b.env[k] }

// send sends a request to path with body and header pairs, and returns
// the answer and its access line.
func (b *cacheBench) send(path, body string, header ...string) (*httptest.ResponseRecorder, map[string]any) {
	b.t.Helper()
	req := httptest.NewRequest("POST", "http://127.0.0.1:8080"+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Add(header[i], header[i+1])
	}
	b.logs.Reset()
	rec := httptest.NewRecorder()
	b.p.ServeHTTP(rec, req)
	var line map[string]any
	for l := range strings.Lines(b.logs.String()) {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "request" {
			line = m
		}
	}
	if line == nil {
		b.t.Fatalf("no access line in %q", b.logs)
	}
	return rec, line
}

const onFailureRoute = `{"upstreams":{"u":{"url":"http://upstream.test"}},
	"routes":[{"name":"chat","upstream":"u","cache":{"serve":"on_failure"}}]}`

func askBody(prompt string, stream bool) string {
	s := ""
	if stream {
		s = `"stream":true,`
	}
	return `{"model":"gpt-x",` + s + `"messages":[{"role":"user","content":"` + prompt + `"}]}`
}

// TestCacheOnFailureServesTheStoredAnswerOnlyWhenTheUpstreamFails: with
// "serve":"on_failure", every request reaches the upstream while it
// answers; once it is down (503s, refused connections, its breakers
// open) a request asked before gets the answer stored, byte for byte,
// plain and streamed, marked stale with its Age, and a request never
// asked gets the upstream's failure as it would without a cache.
func TestCacheOnFailureServesTheStoredAnswerOnlyWhenTheUpstreamFails(t *testing.T) {
	for _, how := range []string{down503, downRefused, downBreaker} {
		for _, stream := range []bool{false, true} {
			name := how + "/plain"
			if stream {
				name = how + "/stream"
			}
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					b := newCacheBench(t, onFailureRoute, nil)
					asked := askBody("What is the capital of France?", stream)
					var stored string
					for i := range 2 {
						rec, line := b.send("/v1/chat/completions", asked)
						if rec.Code != 200 || rec.Header().Get("X-Rebound-Cache") != "" {
							t.Fatalf("healthy request %d: %d, x-rebound-cache %q", i, rec.Code, rec.Header().Get("X-Rebound-Cache"))
						}
						if line["cache"] != "stored" {
							t.Errorf("healthy request %d: access line's cache %v, want stored", i, line["cache"])
						}
						stored = rec.Body.String()
					}
					if _, hits := b.up.state(); hits != 2 {
						t.Fatalf("the upstream had %d requests while healthy, want 2 (no hits on_failure)", hits)
					}
					if stream && !strings.HasSuffix(stored, "data: [DONE]\n\n") {
						t.Fatalf("the stream stored does not end with [DONE]: %q", stored)
					}
					time.Sleep(90 * time.Second)
					b.up.fail(how)
					for i := range 2 {
						rec, line := b.send("/v1/chat/completions", asked)
						if rec.Code != 200 || rec.Header().Get("X-Rebound-Cache") != "stale" {
							t.Fatalf("down, asked again %d: %d, x-rebound-cache %q: %s", i, rec.Code, rec.Header().Get("X-Rebound-Cache"), rec.Body)
						}
						if got := rec.Body.String(); got != stored {
							t.Errorf("the stale answer is not the stored one byte for byte:\n got %q\nwant %q", got, stored)
						}
						// Stored 90 s before, and the retries of the
						// failed attempts take their time.
						if age, err := strconv.Atoi(rec.Header().Get("Age")); err != nil || age < 90 || age > 120 {
							t.Errorf("Age %q, want 90 to 120", rec.Header().Get("Age"))
						}
						if line["cache"] != "stale" || line["status"] != 200.0 {
							t.Errorf("access line: cache %v, status %v", line["cache"], line["status"])
						}
						if line["stream"] != nil != stream {
							t.Errorf("access line's stream %v for a stream %v", line["stream"], stream)
						}
					}
					rec, line := b.send("/v1/chat/completions", askBody("Never asked before", stream))
					want := map[string]int{down503: 503, downRefused: 502, downBreaker: 503}[how]
					if rec.Code != want || rec.Header().Get("X-Rebound-Cache") != "" {
						t.Errorf("a new request while down: %d, x-rebound-cache %q, want %d as without a cache", rec.Code, rec.Header().Get("X-Rebound-Cache"), want)
					}
					if line["cache"] != "miss" {
						t.Errorf("a new request while down: access line's cache %v, want miss", line["cache"])
					}
				})
			})
		}
	}
}

// TestCacheKeepsTenantsApart: tenant b never gets the answer tenant a
// stored, the same request though it is.
func TestCacheKeepsTenantsApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := map[string]string{"A": "tok-a", "B": "tok-b"}
		b := newCacheBench(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},
			"routes":[{"name":"chat","upstream":"u","cache":{"serve":"on_failure"}}],
			"tenants":{"a":{"tokens_env":"A"},"b":{"tokens_env":"B"}}}`, env)
		asked := askBody("hello", false)
		if rec, _ := b.send("/v1/chat/completions", asked, "Authorization", "Bearer tok-a"); rec.Code != 200 {
			t.Fatalf("tenant a: %d", rec.Code)
		}
		b.up.fail(down503)
		if rec, _ := b.send("/v1/chat/completions", asked, "Authorization", "Bearer tok-b"); rec.Code != 503 || rec.Header().Get("X-Rebound-Cache") != "" {
			t.Errorf("tenant b, down: %d, x-rebound-cache %q; want the upstream's 503, not a's answer", rec.Code, rec.Header().Get("X-Rebound-Cache"))
		}
		if rec, _ := b.send("/v1/chat/completions", asked, "Authorization", "Bearer tok-a"); rec.Header().Get("X-Rebound-Cache") != "stale" {
			t.Errorf("tenant a, down: %d, x-rebound-cache %q; want its own answer, stale", rec.Code, rec.Header().Get("X-Rebound-Cache"))
		}
	})
}

// TestCacheKeepsClientKeysApart: with pass_client_key, an answer stored
// for one client's own key is not served to another key.
func TestCacheKeepsClientKeysApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newCacheBench(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},"pass_client_key":true,
			"routes":[{"name":"chat","upstream":"u","cache":{"serve":"on_failure"}}]}`, nil)
		asked := askBody("hello", false)
		b.send("/v1/chat/completions", asked, "Authorization", "Bearer sk-one")
		b.up.fail(down503)
		if rec, _ := b.send("/v1/chat/completions", asked, "Authorization", "Bearer sk-two"); rec.Code != 503 {
			t.Errorf("another key, down: %d, want 503", rec.Code)
		}
		if rec, _ := b.send("/v1/chat/completions", asked, "Authorization", "Bearer sk-one"); rec.Header().Get("X-Rebound-Cache") != "stale" {
			t.Errorf("the same key, down: %d, want its own answer, stale", rec.Code)
		}
	})
}

// TestCacheNeverServesARequestWithSideEffects: a request the provider may
// act on (a path that is no model call, even one the route calls safe;
// an Idempotency-Key) is neither kept nor served, and its line has no
// cache field.
func TestCacheNeverServesARequestWithSideEffects(t *testing.T) {
	for _, c := range []struct {
		name, path string
		header     []string
	}{
		{"a path that is no model call", "/v1/assistants", nil},
		{"a path the route calls safe", "/v1/vector_stores", nil},
		{"an Idempotency-Key", "/v1/chat/completions", []string{"Idempotency-Key", "k-1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newCacheBench(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},
					"routes":[{"name":"chat","upstream":"u","safe_paths":["/v1/vector_stores"],"cache":{"serve":"always"}}]}`, nil)
				asked := askBody("make one", false)
				for range 2 {
					rec, line := b.send(c.path, asked, c.header...)
					if rec.Code != 200 || rec.Header().Get("X-Rebound-Cache") != "" || line["cache"] != nil {
						t.Fatalf("%d, x-rebound-cache %q, access line's cache %v", rec.Code, rec.Header().Get("X-Rebound-Cache"), line["cache"])
					}
				}
				if _, hits := b.up.state(); hits != 2 {
					t.Errorf("the upstream had %d requests, want 2: none served from the cache", hits)
				}
				b.up.fail(down503)
				if rec, _ := b.send(c.path, asked, c.header...); rec.Code == 200 {
					t.Errorf("down: 200 (x-rebound-cache %q), want the upstream's failure", rec.Header().Get("X-Rebound-Cache"))
				}
			})
		})
	}
}

// TestCacheAlwaysServesARepeatWithinTTLWithoutTheUpstream: with
// "serve":"always", a request asked again within ttl reaches no upstream
// and is marked hit, its saved_usd priced; past ttl it goes to the
// upstream again; Cache-Control from the client is honoured: no-cache
// serves nothing, no-store keeps nothing.
func TestCacheAlwaysServesARepeatWithinTTLWithoutTheUpstream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newCacheBench(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},
			"routes":[{"name":"chat","upstream":"u","cache":{"serve":"always","ttl":"10m"}}],
			"prices":{"gpt-x":{"input_per_million":1,"output_per_million":2}}}`, nil)
		asked := askBody("hello", false)
		first, _ := b.send("/v1/chat/completions", asked)
		time.Sleep(5 * time.Minute)
		rec, line := b.send("/v1/chat/completions", asked)
		if rec.Code != 200 || rec.Header().Get("X-Rebound-Cache") != "hit" || rec.Header().Get("Age") != "300" {
			t.Fatalf("asked again within ttl: %d, x-rebound-cache %q, Age %q", rec.Code, rec.Header().Get("X-Rebound-Cache"), rec.Header().Get("Age"))
		}
		if rec.Body.String() != first.Body.String() {
			t.Errorf("the hit is not the stored answer: %q, want %q", rec.Body, first.Body)
		}
		if _, hits := b.up.state(); hits != 1 {
			t.Errorf("the upstream had %d requests, want 1", hits)
		}
		if line["cache"] != "hit" || line["saved_usd"] == nil || line["cost_usd"] != nil {
			t.Errorf("access line: cache %v, saved_usd %v, cost_usd %v; want hit, a saving, no cost", line["cache"], line["saved_usd"], line["cost_usd"])
		}
		if rec, line := b.send("/v1/chat/completions", asked, "Cache-Control", "no-cache"); rec.Header().Get("X-Rebound-Cache") != "" || line["cache"] != "stored" {
			t.Errorf("no-cache: x-rebound-cache %q, cache %v; want the upstream's answer", rec.Header().Get("X-Rebound-Cache"), line["cache"])
		}
		other := askBody("not to be kept", false)
		for range 2 {
			if rec, line := b.send("/v1/chat/completions", other, "Cache-Control", "no-store"); rec.Header().Get("X-Rebound-Cache") != "" || line["cache"] != "miss" {
				t.Errorf("no-store: x-rebound-cache %q, cache %v; want the upstream's answer, not kept", rec.Header().Get("X-Rebound-Cache"), line["cache"])
			}
		}
		time.Sleep(11 * time.Minute)
		if rec, _ := b.send("/v1/chat/completions", asked); rec.Header().Get("X-Rebound-Cache") != "" {
			t.Errorf("past ttl: x-rebound-cache %q, want the upstream's answer", rec.Header().Get("X-Rebound-Cache"))
		}
		if _, hits := b.up.state(); hits != 5 {
			t.Errorf("the upstream had %d requests, want 5", hits)
		}
	})
}

// TestCachePassesOnASpendCapRefusal: a tenant's spend cap refuses a
// request whose answer is stored, the upstream down: the refusal goes to
// the client, not the stored answer. The cache outlives a reload that
// changes only the cap.
func TestCachePassesOnASpendCapRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := map[string]string{"A": "tok-a"}
		const cfg = `{"upstreams":{"u":{"url":"http://upstream.test"}},
			"routes":[{"name":"chat","upstream":"u","cache":{"serve":"on_failure"}}],
			"prices":{"gpt-x":{"input_per_million":1,"output_per_million":2}},
			"tenants":{"a":{"tokens_env":"A","spend_cap_usd":%s,"models":["gpt-x"]}}}`
		b := newCacheBench(t, strings.Replace(cfg, "%s", "10", 1), env)
		asked := askBody("hello", false)
		if rec, _ := b.send("/v1/chat/completions", asked, "Authorization", "Bearer tok-a"); rec.Code != 200 {
			t.Fatalf("under the cap: %d %s", rec.Code, rec.Body)
		}
		q, err := b.p.Reload(config(t, strings.Replace(cfg, "%s", "0", 1), env))
		if err != nil {
			t.Fatal(err)
		}
		b.p = q
		b.up.fail(down503)
		rec, line := b.send("/v1/chat/completions", asked, "Authorization", "Bearer tok-a")
		if rec.Code != 429 || rec.Header().Get("X-Rebound-Cache") != "" || !strings.Contains(rec.Body.String(), "insufficient_quota") {
			t.Errorf("over the cap: %d, x-rebound-cache %q: %s; want the cap's refusal", rec.Code, rec.Header().Get("X-Rebound-Cache"), rec.Body)
		}
		if line["outcome"] != "tenant_spend_cap" {
			t.Errorf("access line's outcome %v, want tenant_spend_cap", line["outcome"])
		}
	})
}

// TestCacheRateLimitCountsAnAnswerServed: an answer served from the cache
// is a request to its tenant's rate limit, and the limit's refusal is
// passed on though an answer is stored.
func TestCacheRateLimitCountsAnAnswerServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := map[string]string{"A": "tok-a"}
		b := newCacheBench(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},
			"routes":[{"name":"chat","upstream":"u","cache":{"serve":"always"}}],
			"tenants":{"a":{"tokens_env":"A","requests_per_minute":1}}}`, env)
		asked := askBody("hello", false)
		if rec, _ := b.send("/v1/chat/completions", asked, "Authorization", "Bearer tok-a"); rec.Code != 200 {
			t.Fatalf("first: %d", rec.Code)
		}
		time.Sleep(time.Minute)
		if rec, _ := b.send("/v1/chat/completions", asked, "Authorization", "Bearer tok-a"); rec.Header().Get("X-Rebound-Cache") != "hit" {
			t.Fatalf("a minute on: %d, x-rebound-cache %q, want a hit", rec.Code, rec.Header().Get("X-Rebound-Cache"))
		}
		rec, line := b.send("/v1/chat/completions", asked, "Authorization", "Bearer tok-a")
		if rec.Code != 429 || rec.Header().Get("X-Rebound-Cache") != "" || line["outcome"] != "tenant_rate_limit" {
			t.Errorf("at once after the hit: %d, x-rebound-cache %q, outcome %v; want the rate limit's 429", rec.Code, rec.Header().Get("X-Rebound-Cache"), line["outcome"])
		}
	})
}

// TestCacheConfigRefusesABadValueInOneLine: a route's bad cache config is
// refused at start, in one line naming the route and the field.
func TestCacheConfigRefusesABadValueInOneLine(t *testing.T) {
	for _, c := range []struct{ cache, want string }{
		{`{}`, `routes[0].cache.serve: missing`},
		{`{"serve":"sometimes"}`, `routes[0].cache.serve: "sometimes" is neither`},
		{`{"serve":"always","ttl":"10x"}`, `routes[0].cache.ttl: "10x" is not a duration`},
		{`{"serve":"always","ttl":"-1m"}`, `routes[0].cache.ttl: "-1m" is not positive`},
		{`{"serve":"on_failure","max_stale":"soon"}`, `routes[0].cache.max_stale: "soon" is not a duration`},
		{`{"serve":"on_failure","max_bytes":-1}`, `routes[0].cache.max_bytes: negative`},
		{`{"serve":"always","ttl":"2h","max_stale":"1h"}`, `routes[0].cache: ttl 2h0m0s is past max_stale 1h0m0s`},
		{`{"serve":"always","size":1}`, `unknown field "size"`},
	} {
		_, err := proxy.ParseConfig([]byte(`{"upstreams":{"u":{"url":"http://upstream.test"}},
			"routes":[{"name":"chat","upstream":"u","cache":`+c.cache+`}]}`), func(string) string { return "" })
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("cache %s: %v, want one line with %q", c.cache, err, c.want)
		}
	}
}

// TestCacheReloadKeepsARouteCacheWhoseConfigIsUnchanged: a reload that
// leaves a route's cache config as it was keeps its answers; one that
// changes it starts the route's cache afresh.
func TestCacheReloadKeepsARouteCacheWhoseConfigIsUnchanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newCacheBench(t, onFailureRoute, nil)
		asked := askBody("hello", false)
		b.send("/v1/chat/completions", asked)
		b.up.fail(down503)
		// Another route's change is no change to this one's.
		q, err := b.p.Reload(config(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},
			"routes":[{"name":"chat","upstream":"u","cache":{"serve":"on_failure"}},{"name":"other","upstream":"u"}]}`, nil))
		if err != nil {
			t.Fatal(err)
		}
		b.p = q
		if rec, _ := b.send("/v1/chat/completions", asked); rec.Header().Get("X-Rebound-Cache") != "stale" {
			t.Errorf("after a reload that keeps the cache config: %d, want the stored answer", rec.Code)
		}
		q, err = b.p.Reload(config(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},
			"routes":[{"name":"chat","upstream":"u","cache":{"serve":"on_failure","max_stale":"1h"}}]}`, nil))
		if err != nil {
			t.Fatal(err)
		}
		b.p = q
		if rec, _ := b.send("/v1/chat/completions", asked); rec.Code != 503 {
			t.Errorf("after a reload that changes the cache config: %d, want 503 from a cache afresh", rec.Code)
		}
	})
}

// TestCacheKeepsApartClientCredentialsOfEveryScheme: with pass_client_key
// the whole Authorization header reaches the upstream, whatever its
// scheme, so two clients that differ only there never share an answer.
func TestCacheKeepsApartClientCredentialsOfEveryScheme(t *testing.T) {
	for name, pair := range map[string][2][]string{
		"basic":          {{"Authorization", "Basic YTpi"}, {"Authorization", "Basic Yzpk"}},
		"another scheme": {{"Authorization", "Token sk-one"}, {"Authorization", "Token sk-two"}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := newCacheBench(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},"pass_client_key":true,
			"routes":[{"name":"chat","upstream":"u","cache":{"serve":"on_failure"}}]}`, nil)
				asked := askBody("hello", false)
				if rec, _ := b.send("/v1/chat/completions", asked, pair[0]...); rec.Code != 200 {
					t.Fatalf("first client: %d", rec.Code)
				}
				b.up.fail(down503)
				if rec, _ := b.send("/v1/chat/completions", asked, pair[1]...); rec.Code != 503 {
					t.Errorf("another client's credential, down: %d %q, want 503", rec.Code, rec.Header().Get("X-Rebound-Cache"))
				}
			})
		})
	}
}
