package proxy_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/rebound-go/rebound/proxy"
)

// figuresHandler serves /metrics as the command does, from the figures of
// the proxy *p: each series under the name Prometheus reads from
// OpenTelemetry's ("rebound.proxy.tenant.requests", a counter, as
// rebound_proxy_tenant_requests_total), its labels in the order the proxy
// gives them. The command's own test reads the real exporter's.
func figuresHandler(p **proxy.Proxy) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		for f := range (*p).Figures {
			s := proxy.ProxySeries[f.Series]
			name := strings.ReplaceAll(s.Name, ".", "_")
			if !s.Gauge {
				name += "_total"
			}
			labels := make([]string, len(f.Labels))
			for i, l := range f.Labels {
				labels[i] = fmt.Sprintf("%s=%q", l.Key, l.Value)
			}
			fmt.Fprintf(&b, "%s{%s} %s\n", name, strings.Join(labels, ","), strconv.FormatFloat(f.Value, 'g', -1, 64))
		}
		w.Write([]byte(b.String()))
	})
}
