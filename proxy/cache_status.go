package proxy

import (
	"fmt"
	"strings"
)

// cacheJSON is a route's cache on the status page: what it served and
// kept since the process started (or since the route's cache config
// changed), and what it holds (null when its store cannot say, as a
// shared one cannot).
type cacheJSON struct {
	Route   string `json:"route"`
	Serve   string `json:"serve"`
	Hits    int64  `json:"hits"`
	Stale   int64  `json:"stale"`
	Stored  int64  `json:"stored"`
	Misses  int64  `json:"misses"`
	Entries *int   `json:"entries"`
	Bytes   *int64 `json:"bytes"`
}

// cacheRows returns the caches of p's routes, in the routes' order.
func (p *Proxy) cacheRows() []cacheJSON {
	rows := []cacheJSON{}
	for _, r := range p.routes {
		if r.cache == nil {
			continue
		}
		s := r.cache.Stats()
		j := cacheJSON{Route: r.name, Serve: r.cache.Config().Serve.String(), Hits: s.Hits, Stale: s.Stale, Stored: s.Stored, Misses: s.Misses}
		if s.Entries >= 0 {
			j.Entries, j.Bytes = &s.Entries, &s.Bytes
		}
		rows = append(rows, j)
	}
	return rows
}

// writeCacheMetrics writes the series of the routes' caches to b, in
// Prometheus' text format, labelled by the route's name alone.
func (p *Proxy) writeCacheMetrics(b *strings.Builder) {
	rows := p.cacheRows()
	if len(rows) == 0 {
		return
	}
	for _, s := range []struct {
		name, typ, help string
		value           func(cacheJSON) (int64, bool)
	}{
		{"rebound_proxy_cache_hits_total", "counter", "Answers each route's cache served younger than its ttl, no upstream asked (serve: always).",
			func(j cacheJSON) (int64, bool) { return j.Hits, true }},
		{"rebound_proxy_cache_stale_total", "counter", "Answers each route's cache served in place of its upstreams' failure.",
			func(j cacheJSON) (int64, bool) { return j.Stale, true }},
		{"rebound_proxy_cache_stored_total", "counter", "Answers each route's cache kept.",
			func(j cacheJSON) (int64, bool) { return j.Stored, true }},
		{"rebound_proxy_cache_entries", "gauge", "Answers each route's cache holds in this process's memory.",
			func(j cacheJSON) (int64, bool) {
				if j.Entries == nil {
					return 0, false
				}
				return int64(*j.Entries), true
			}},
		{"rebound_proxy_cache_bytes", "gauge", "Bytes each route's cache holds in this process's memory.",
			func(j cacheJSON) (int64, bool) {
				if j.Bytes == nil {
					return 0, false
				}
				return *j.Bytes, true
			}},
	} {
		fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", s.name, s.help, s.name, s.typ)
		for _, j := range rows {
			if v, ok := s.value(j); ok {
				fmt.Fprintf(b, "%s{route=%q} %d\n", s.name, j.Route, v)
			}
		}
	}
}
