package proxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/front"
)

// The status page's paths: the page, and the JSON it polls.
const (
	StatusPagePath = "/ui"
	StatusJSONPath = "/ui/status"
)

// statusPage is the page, everything in it: no file, font or script
// comes from anywhere else.
//
//go:embed ui/index.html
var statusPage []byte

// statusPolicy is the page's Content-Security-Policy: its own inline
// style and script (by their hashes) and fetches of its own origin,
// nothing else, so that even a page that was tricked into it could load
// nothing from elsewhere.
var statusPolicy = sync.OnceValue(func() string {
	return "default-src 'none'; style-src " + inlineHash("style") + "; script-src " + inlineHash("script") +
		"; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
})

// inlineHash returns the CSP hash source of the page's one <tag> element.
func inlineHash(tag string) string {
	_, rest, ok := bytes.Cut(statusPage, []byte("<"+tag+">"))
	body, _, ok2 := bytes.Cut(rest, []byte("</"+tag+">"))
	if !ok || !ok2 {
		panic("proxy: the status page has no <" + tag + "> element")
	}
	sum := sha256.Sum256(body)
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// admitAdmin reports whether r may see the admin pages (the status page
// and /metrics), by the one admin rule of rebound's servers (front.Admin),
// writing the refusal in OpenAI's dialect.
func (p *Proxy) admitAdmin(w http.ResponseWriter, r *http.Request) bool {
	admin := front.Admin{Token: p.adminToken, Server: "rebound proxy", Pages: "the status page and /metrics"}
	return admin.Admit(w, r, func(w http.ResponseWriter, status int, msg string) { writeError(w, DialectOpenAI, status, msg) })
}

// serveStatus serves the status page and its JSON, to those admitAdmin
// admits; every other path under StatusPagePath is the proxy's own too,
// never forwarded.
func (p *Proxy) serveStatus(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		writeError(w, DialectOpenAI, http.StatusMethodNotAllowed, "the status page takes GET only")
		return
	}
	if !p.admitAdmin(w, r) {
		return
	}
	switch r.URL.Path {
	case StatusPagePath:
	case StatusPagePath + "/":
		http.Redirect(w, r, StatusPagePath, http.StatusMovedPermanently)
		return
	case StatusJSONPath:
		b, err := json.Marshal(p.status(r.Context(), time.Now()))
		if err != nil {
			writeError(w, DialectOpenAI, http.StatusInternalServerError, "the status could not be written")
			return
		}
		h.Set("Content-Type", "application/json")
		w.Write(b)
		return
	default:
		writeError(w, DialectOpenAI, http.StatusNotFound, "the status page is at "+StatusPagePath)
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", statusPolicy())
	h.Set("X-Frame-Options", "DENY")
	w.Write(statusPage)
}

// statusJSON is what the status page polls.
type statusJSON struct {
	Now           time.Time      `json:"now"`
	WindowSeconds int            `json:"window_seconds"`
	ConfigVersion string         `json:"config_version,omitempty"`
	Upstreams     []upstreamJSON `json:"upstreams"`
	Tenants       []tenantJSON   `json:"tenants"`
	Failures      []failureJSON  `json:"failures"`
	// Caches are the routes' response caches, in the routes' order.
	Caches []cacheJSON `json:"caches"`
	// MCPServers are the config's MCP servers, by name.
	MCPServers []mcpServerJSON `json:"mcp_servers"`
}

// upstreamJSON is an upstream's key: its state and the figures of its
// calls over the window. A figure not known is null.
type upstreamJSON struct {
	Upstream string `json:"upstream"`
	Key      string `json:"key"` // the name of the variable that holds it, "" for an upstream's only key
	// Host is the upstream's scheme, host and port (no user, path or
	// query, where keys may travel); "" for an upstream no longer in the
	// config.
	Host             string     `json:"host"`
	Breaker          string     `json:"breaker"`
	RequestsHeadroom *float64   `json:"requests_headroom"`
	TokensHeadroom   *float64   `json:"tokens_headroom"`
	CoolingUntil     *time.Time `json:"cooling_until"`
	InFlight         int64      `json:"in_flight"`
	Calls            int64      `json:"calls"`
	// Each of Calls was answered by its first attempt, answered after
	// retries, or given up.
	AnsweredFirst        int64            `json:"answered_first"`
	AnsweredAfterRetries int64            `json:"answered_after_retries"`
	GaveUp               int64            `json:"gave_up"`
	Broken               int64            `json:"broken"` // answers that broke off after they began
	Attempts             int64            `json:"attempts"`
	RetryRate            float64          `json:"retry_rate"`
	Failures             map[string]int64 `json:"failures"`
	P50Ms                *float64         `json:"p50_ms"`
	P99Ms                *float64         `json:"p99_ms"`
	// PerMinute is the chart: the last chartMinutes minutes, oldest
	// first, the current one last.
	PerMinute []minuteJSON `json:"per_minute"`
	// The tokens of the answers the key gave over the window, and the
	// share of their input read from the provider's cache.
	tokensJSON
}

type tenantJSON struct {
	Name     string     `json:"name"`
	SpentUSD float64    `json:"spent_usd"`
	CapUSD   *float64   `json:"cap_usd"` // null: uncapped; 0 is a cap that allows nothing
	Period   string     `json:"period,omitempty"`
	Resets   *time.Time `json:"resets"`
	Requests int64      `json:"requests"`
	Refused  int64      `json:"refused"`
	// ToolCalls are the tenant's calls of MCP tools (tools/call) the
	// proxy passed on, since the process started, beside its model calls
	// (Requests).
	ToolCalls int64 `json:"tool_calls"`
	// The tokens of the answers to the tenant's requests since the
	// process started, and the share of their input read from the
	// provider's cache.
	tokensJSON
}

type failureJSON struct {
	Time     time.Time `json:"time"`
	Route    string    `json:"route"`
	Upstream string    `json:"upstream"`
	Key      string    `json:"key"`
	Kind     string    `json:"kind"`
	Status   int       `json:"status,omitempty"`
}

// status returns the status at now: a row per key of p.keyRows, with the
// figures the board has of it, then the board's rows that none names.
func (p *Proxy) status(ctx context.Context, now time.Time) statusJSON {
	s := statusJSON{Now: now.UTC(), WindowSeconds: int(StatusWindow / time.Second), ConfigVersion: p.configVersion,
		Upstreams: []upstreamJSON{}, Tenants: []tenantJSON{}, Failures: []failureJSON{}}
	figures := map[[2]string]rowFigures{}
	for _, r := range p.board.all() {
		figures[[2]string{r.upstream, r.key}] = r.figures(now)
	}
	for _, k := range p.keyRows() {
		id := [2]string{k.Upstream, k.Key}
		u := upstreamRow(now, k.Upstream, k.Key, figures[id])
		delete(figures, id)
		u.Breaker, u.Host = k.Breaker, k.Host
		if k.Known {
			u.RequestsHeadroom, u.TokensHeadroom = &k.RequestsHeadroom, &k.TokensHeadroom
		}
		if !k.CoolingUntil.IsZero() && k.CoolingUntil.After(now) {
			u.CoolingUntil = &k.CoolingUntil
		}
		s.Upstreams = append(s.Upstreams, u)
	}
	for _, r := range p.board.all() {
		if f, ok := figures[[2]string{r.upstream, r.key}]; ok {
			s.Upstreams = append(s.Upstreams, upstreamRow(now, r.upstream, r.key, f))
		}
	}
	for _, t := range p.tenantRows(ctx) {
		j := tenantJSON{Name: t.Name, SpentUSD: t.SpentUSD, Period: t.Period, Requests: t.Requests, Refused: t.Refused, ToolCalls: t.ToolCalls, tokensJSON: t.Tokens.json()}
		if !t.Resets.IsZero() {
			j.Resets = &t.Resets
			j.CapUSD = &t.CapUSD
		}
		s.Tenants = append(s.Tenants, j)
	}
	s.Caches = p.cacheRows()
	s.MCPServers = p.mcpRows(now)
	for _, f := range p.board.latest() {
		s.Failures = append(s.Failures, failureJSON{Time: f.at.UTC(), Route: f.route, Upstream: f.upstream, Key: f.key, Kind: f.kind, Status: f.status})
	}
	return s
}

// upstreamRow returns the JSON of an upstream's key with figures f, as
// they were at now.
func upstreamRow(now time.Time, upstream, key string, f rowFigures) upstreamJSON {
	u := upstreamJSON{Upstream: upstream, Key: key, InFlight: f.inFlight, Calls: f.calls,
		AnsweredFirst: f.first, AnsweredAfterRetries: f.afterRetries, GaveUp: f.gaveUp, Broken: f.broken, Attempts: f.attempts,
		Failures: map[string]int64{}, PerMinute: perMinute(now, f.minutes), tokensJSON: f.tokens.json()}
	if f.calls > 0 {
		u.RetryRate = float64(f.retried) / float64(f.calls)
	}
	for k, n := range f.failed {
		if n > 0 {
			u.Failures[rebound.Kind(k).String()] = n
		}
	}
	if f.p50 > 0 {
		p50, p99 := milliseconds(f.p50), milliseconds(f.p99)
		u.P50Ms, u.P99Ms = &p50, &p99
	}
	return u
}

func milliseconds(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// sending is what one send of a request to an upstream allocates, in one
// allocation rather than two: its Transport, and its answer's body as it
// counts in flight.
type sending struct {
	tr       rebound.Transport
	inFlight inFlightBody
}

// inFlightBody is an answer's body that counts as in flight to its row
// until it is closed.
type inFlightBody struct {
	io.ReadCloser
	row  *statusRow
	once sync.Once
}

func (b *inFlightBody) Close() error {
	b.once.Do(func() { b.row.inFlight.Add(-1) })
	return b.ReadCloser.Close()
}
