package proxy_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/proxy"
)

// BenchmarkProxyPaced: requests over real loopback connections, one every
// 2 ms (500 a second), so that the process sleeps between them as a proxy
// under a modest load does: the upstream alone (direct), a bare
// httputil.ReverseProxy (hop) and the proxy. Besides time and allocations
// it reports, per request, the goroutines started and the median latency.
// Client, proxy and upstream share the process, so a figure is the
// three's together; the difference between hop and rebound is the proxy's.
func BenchmarkProxyPaced(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, canned)
	}))
	defer up.Close()
	target, _ := url.Parse(up.URL)
	hop := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }})
	defer hop.Close()
	p, err := proxy.New(proxy.Options{Upstream: up.URL, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	reb := httptest.NewServer(p)
	defer reb.Close()
	const body = `{"model":"gpt-x","messages":[{"role":"user","content":"hello"}]}`
	for _, c := range []struct{ name, url string }{{"direct", up.URL}, {"hop", hop.URL}, {"rebound", reb.URL}} {
		b.Run(c.name, func(b *testing.B) {
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
			defer client.CloseIdleConnections()
			pace := time.NewTicker(2 * time.Millisecond)
			defer pace.Stop()
			var latencies []time.Duration
			created := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
			metrics.Read(created)
			before := created[0].Value.Uint64()
			b.ReportAllocs()
			for b.Loop() {
				<-pace.C
				sent := time.Now()
				resp, err := client.Post(c.url+"/v1/chat/completions", "application/json", strings.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				latencies = append(latencies, time.Since(sent))
			}
			metrics.Read(created)
			b.ReportMetric(float64(created[0].Value.Uint64()-before)/float64(b.N), "goroutines/op")
			slices.Sort(latencies)
			b.ReportMetric(float64(latencies[len(latencies)/2].Microseconds()), "p50-µs")
		})
	}
}
