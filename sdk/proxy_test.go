package sdk_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/proxy"
)

// newProxy returns rebound proxy's handler with its recommended setup, in
// front of base, as `rebound proxy --upstream` runs it.
func newProxy(t *testing.T, base http.RoundTripper) http.Handler {
	t.Helper()
	// The SDKs call the proxy by the provider's test name, not a loopback
	// one.
	p, err := proxy.New(proxy.Options{Upstream: baseURL, Base: base, AllowHosts: []string{"provider.test"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// proxied are the providers whose official SDKs are compared through the
// proxy.
var proxied = []string{"OpenAI", "Anthropic"}

// wantsProxy is what each SDK does through the proxy, its retries off.
var wantsProxy = map[string]map[string]outcome{
	"OpenAI": {
		"Transient":               {2, 0, -1},
		"RateLimitedRetryAfter2s": {2, 0, 2e9},
		"RateLimitedRetryAfter1h": {1, 429, 0},
		"Overloaded":              {2, 503, -1},
		"QuotaExhausted":          {1, 429, 0},
		"ContextOverflow":         {1, 400, 0},
		"Permanent":               {1, 400, 0},
	},
	"Anthropic": {
		"Transient":               {2, 0, -1},
		"RateLimitedRetryAfter2s": {2, 0, 2e9},
		"RateLimitedRetryAfter1h": {1, 429, 0},
		"Overloaded":              {2, 529, -1},
		"QuotaExhausted":          {1, 429, 0},
		"ContextOverflow":         {1, 400, 0},
		"Permanent":               {1, 400, 0},
	},
}

// TestSDKsThroughProxy drives the official OpenAI and Anthropic SDKs, their
// retries off and their base URL at rebound proxy, through each kind of
// failure, beside the same SDK alone with its own retries, and checks the
// table in docs/proxy.md.
func TestSDKsThroughProxy(t *testing.T) {
	var table strings.Builder
	table.WriteString("| provider | failure | rebound kind | through rebound proxy | SDK alone |\n|---|---|---|---|---|\n")
	for _, p := range providers {
		if !strings.Contains(strings.Join(proxied, ","), p.name) {
			continue
		}
		for _, s := range scenarios {
			var through, alone outcome
			t.Run(p.name+"/"+s.name+"/Proxy", func(t *testing.T) {
				through = run(t, p, s, viaProxy)
				if w := wantsProxy[p.name][s.name]; !matches(through, w) {
					t.Errorf("got %+v, want %+v", through, w)
				}
			})
			t.Run(p.name+"/"+s.name+"/SDKAlone", func(t *testing.T) {
				alone = run(t, p, s, sdkAlone)
				if w := wants[p.name][s.name].sdk; !matches(alone, w) {
					t.Errorf("got %+v, want %+v", alone, w)
				}
			})
			fmt.Fprintf(&table, "| %s | %s | %s | %s | %s |\n", p.name, describe(s), s.kind, cell(through), cell(alone))
		}
	}
	if t.Failed() {
		return
	}
	guide, err := os.ReadFile("../docs/proxy.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(guide), table.String()) {
		t.Errorf("docs/proxy.md does not hold the table these tests measured; put this in it:\n%s", table.String())
	}
}

// TestSDKsThroughProxyUnderChaos is the bar: each SDK, its retries
// off, through the proxy to the chaos server in its personality failing
// 35% of requests (seeded), answers at least 185 of 200 calls.
func TestSDKsThroughProxyUnderChaos(t *testing.T) {
	for _, p := range providers {
		if !strings.Contains(strings.Join(proxied, ","), p.name) {
			continue
		}
		t.Run(p.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, err := chaos.New(chaos.Config{Profile: p.profile, FailRate: 0.35, Seed: 1})
				if err != nil {
					t.Fatal(err)
				}
				client := &http.Client{Transport: memoryTransport{newProxy(t, memoryTransport{srv})}}
				ok := 0
				for range 200 {
					if p.call(context.Background(), client, false) == nil {
						ok++
					}
				}
				st := srv.Stats()
				t.Logf("seed 1: %d of 200 calls answered, in %d upstream requests (%v)", ok, st.Requests, st.ByStatus)
				if ok < 185 {
					t.Errorf("%d of 200 calls answered through the proxy; want at least 185", ok)
				}
			})
		})
	}
}

// TestSDKsRaiseTheProvidersStreamErrorThroughProxy: a stream the provider
// ends with its in-band error event after content reaches each official
// SDK through rebound proxy (over loopback, under an http.Server) with that
// event, and the SDK raises the provider's own message, after the text
// that came before it; never a dropped connection.
func TestSDKsRaiseTheProvidersStreamErrorThroughProxy(t *testing.T) {
	messages := map[string]string{
		"OpenAI":    "The server had an error while processing your request.",
		"Anthropic": "Overloaded",
	}
	for _, s := range streamers {
		t.Run(s.name, func(t *testing.T) {
			srv, err := chaos.New(chaos.Config{Seed: 1, Profile: s.profile})
			if err != nil {
				t.Fatal(err)
			}
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				r.Header.Set(chaos.HeaderMode, chaos.ModeText)
				r.Header.Set(chaos.HeaderCutAt, "20")
				r.Header.Set(chaos.HeaderCutHow, "error")
				srv.ServeHTTP(w, r)
			}))
			defer up.Close()
			p, err := proxy.New(proxy.Options{Upstream: up.URL, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				t.Fatal(err)
			}
			front := httptest.NewServer(p)
			defer front.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			text, err := s.stream(ctx, front.URL, &http.Client{})
			if err == nil || !strings.Contains(err.Error(), messages[s.name]) || text == "" {
				t.Errorf("text %q, error %v; want some text, then the provider's %q", text, err, messages[s.name])
			}
			if st := srv.Stats(); st.Requests != 1 {
				t.Errorf("%d requests upstream; want 1: content had come, nothing is retried", st.Requests)
			}
		})
	}
}
