package proxy

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
