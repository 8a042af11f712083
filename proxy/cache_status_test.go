package proxy_test

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/internal/memnet"
	"github.com/rebound-go/rebound/proxy"
)

// TestCacheFiguresOnTheStatusPageAndMetrics: /ui/status has each cached
// route's hits, stale answers, entries and bytes, and /metrics the same
// series by route.
func TestCacheFiguresOnTheStatusPageAndMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := chaos.New(chaos.Config{Seed: 1, Mode: chaos.ModeOK})
		if err != nil {
			t.Fatal(err)
		}
		tr, stop := memnet.Serve(srv)
		defer stop()
		up := &downableUpstream{tr: tr}
		var p *proxy.Proxy
		p, err = proxy.New(proxy.Options{Base: up, Logger: slog.New(slog.DiscardHandler), AdminToken: "admin-token",
			Metrics: figuresHandler(&p),
			Config: config(t, `{"upstreams":{"u":{"url":"http://upstream.test"}},
				"routes":[{"name":"chat","upstream":"u","path_prefix":"/v1/chat","cache":{"serve":"always"}},{"name":"rest","upstream":"u"}]}`, nil)})
		if err != nil {
			t.Fatal(err)
		}
		get := func(path string) string {
			req := httptest.NewRequest("GET", "http://127.0.0.1:8080"+path, nil)
			req.Header.Set("Authorization", "Bearer admin-token")
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, req)
			return rec.Body.String()
		}
		for range 3 {
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, httptest.NewRequest("POST", "http://127.0.0.1:8080/v1/chat/completions", strings.NewReader(askBody("hello", false))))
		}
		var s struct {
			Caches []struct {
				Route               string
				Serve               string
				Hits, Stale, Stored int64
				Entries             *int
				Bytes               *int64
			}
		}
		if err := json.Unmarshal([]byte(get("/ui/status")), &s); err != nil {
			t.Fatal(err)
		}
		if len(s.Caches) != 1 {
			t.Fatalf("caches %+v, want the one cached route", s.Caches)
		}
		c := s.Caches[0]
		if c.Route != "chat" || c.Serve != "always" || c.Hits != 2 || c.Stored != 1 || c.Entries == nil || *c.Entries != 1 || c.Bytes == nil || *c.Bytes <= 0 {
			t.Errorf("cache row %+v (entries %v), want chat, always, 2 hits, 1 stored, 1 entry", c, c.Entries)
		}
		m := get("/metrics")
		for _, want := range []string{`rebound_proxy_cache_hits_total{route="chat"} 2`, `rebound_proxy_cache_stale_total{route="chat"} 0`,
			`rebound_proxy_cache_stored_total{route="chat"} 1`, `rebound_proxy_cache_entries{route="chat"} 1`, `rebound_proxy_cache_bytes{route="chat"} `} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics has no %q:\n%s", want, m)
			}
		}
		if strings.Contains(m, `route="rest"`) {
			t.Errorf("/metrics has a series of a route without a cache:\n%s", m)
		}
	})
}
