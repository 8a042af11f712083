package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cost"
	"github.com/rebound-go/rebound/internal/front"
	"github.com/rebound-go/rebound/internal/frontdoor"
	"github.com/rebound-go/rebound/ratelimit"
)

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// A body is bounded from the first: net/http reads what is left of
	// one before it sends any answer, a refusal's too, and would wait for
	// ever for one that does not come.
	bodyReader := frontdoor.NewBodyReader(r.Body, http.NewResponseController(w), time.Now().Add(p.bodyTimeout), r.ContentLength)
	if r.Body != nil && r.Body != http.NoBody {
		bodyReader.Push()
	}
	if front.Enter((*mounted)(p), w, r) {
		return // refused, a pre-flight, or the front's own paths
	}
	if name, ok := p.mcpServerOf(r.URL.Path); ok {
		p.serveMCP(w, r, name, bodyReader) // before any route
		return
	}
	if r.URL.Path == StatusPagePath || strings.HasPrefix(r.URL.Path, StatusPagePath+"/") {
		p.serveStatus(w, r) // never forwarded
		return
	}
	c := &call{start: time.Now(), client: r, method: r.Method, path: r.URL.Path}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			c.aborted = true
			p.logCall(c, sw.status)
			panic(v) // http.ErrAbortHandler: the client's stream breaks as the upstream's did
		}
		p.logCall(c, sw.status)
	}()
	var admitted bool
	if c.tenant, admitted = p.tenantOf(r); !admitted {
		writeJSON(sw, http.StatusUnauthorized, unauthorizedBody)
		c.outcome = "unauthorized"
		return
	}
	dialect := dialectOfPath(r.URL.Path)
	if hasDotSegment(r.URL.Path) {
		// The upstream (or a server before it) would resolve them, out
		// of its base path, with the operator's key.
		writeError(sw, dialect, http.StatusBadRequest, `the path has "." or ".." segments`)
		c.outcome = "client_error"
		return
	}
	if strings.EqualFold(r.Header.Get("Upgrade"), "h2c") {
		r.Header.Del("Upgrade") // curl --http2 asks, and goes on in HTTP/1.1 when refused
	}
	if r.Header.Get("Upgrade") != "" {
		// A websocket (OpenAI's Realtime API) would have the engine
		// retry, pace and classify what it cannot read.
		writeError(sw, dialect, http.StatusNotImplemented, "protocol upgrades (websockets, the Realtime API) are not proxied")
		c.outcome = "upgrade"
		return
	}
	body, err := readBody(r, bodyReader, p.memory, p.maxBody)
	switch {
	case errors.Is(err, errBodyMemory):
		sw.Header().Set("Retry-After", "1")
		writeError(sw, dialect, http.StatusServiceUnavailable, "the proxy holds as many request bodies as its memory allows; try again")
		c.outcome = "body_memory"
		return
	case errors.Is(err, errTooLarge):
		writeError(sw, dialect, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", p.maxBody))
		c.outcome = "too_large"
		return
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.outcome = "client_error"
		c.err = err
		writeError(sw, dialect, http.StatusRequestTimeout, "the request body did not come in time")
		return
	case err != nil:
		c.outcome = "client_error"
		c.err = err
		writeError(sw, dialect, http.StatusBadRequest, "could not read the request body")
		return
	}
	defer body.release()
	ms, err := readModels(r.Method, r.URL.Path, r.Header, body)
	if err != nil {
		c.outcome = "client_error"
		writeError(sw, dialect, http.StatusBadRequest, err.Error())
		return
	}
	c.model, c.batchModels, c.unseenModel, c.jsonBody = ms.model, ms.batch, ms.unseen, ms.json
	rt := p.match(r.URL.Path, c.model)
	if rt == nil {
		writeJSON(sw, http.StatusNotFound, `{"error":{"message":"no route for this path and model","type":"not_found","code":404}}`)
		c.outcome = "no_route"
		return
	}
	c.route = rt.name
	if d := rt.targets[0].up.dialect; d != "" {
		dialect = d
	}
	c.dialect = dialect
	if int64(len(body.b)) > rt.maxBody {
		writeError(sw, dialect, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", rt.maxBody))
		c.outcome = "too_large"
		return
	}
	c.rt, c.body = rt, body
	ctx, admitted := p.admitTenant(sw, r, c)
	if !admitted {
		return
	}
	out := r.WithContext(c.within(ctx))
	out.Body, out.ContentLength = http.NoBody, 0 // the forwarder sends c.body
	p.relay(sw, out, c)
}

// mounted is the Proxy as the front sees it (front.Mounted): the
// methods are not the Proxy's own, which a library user would see.
type mounted Proxy

func (m *mounted) Door() *frontdoor.Door { return m.door }

// Refuse answers a request the door refused, in its path's dialect (an
// MCP server's, a JSON-RPC error), and logs it.
func (m *mounted) Refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	if _, ok := (*Proxy)(m).mcpServerOf(r.URL.Path); ok {
		writeRPCError(w, status, "Forbidden: "+msg)
	} else {
		writeError(w, dialectOfPath(r.URL.Path), status, msg)
	}
	(*Proxy)(m).logCall(&call{start: time.Now(), method: r.Method, path: r.URL.Path, outcome: "forbidden"}, status)
}

func (m *mounted) Draining() bool { return m.draining.Load() }

func (m *mounted) Metrics() http.Handler { return m.metrics }

func (m *mounted) AdmitAdmin(w http.ResponseWriter, r *http.Request) bool {
	return (*Proxy)(m).admitAdmin(w, r)
}

// hasDotSegment reports whether path has a "." or ".." segment (escaped
// or not: path is decoded).
func hasDotSegment(path string) bool {
	for seg := range strings.SplitSeq(path, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// gatewayError answers a request no upstream answered, in its dialect.
func (p *Proxy) gatewayError(w http.ResponseWriter, r *http.Request, err error) {
	c := r.Context().Value(callKey{}).(*call)
	c.err = err
	if r.Context().Err() != nil {
		c.outcome = "client_gone"
		return
	}
	status, msg := http.StatusBadGateway, "upstream unreachable"
	var (
		g        *rebound.GiveUpError
		capError *cost.CapError
	)
	switch {
	case errors.As(err, &capError):
		p.refuseSpend(w, c, capError)
		return
	case errors.Is(err, cost.ErrNoPrice):
		// A capped tenant's request sent on to a model without a price:
		// its cap could not be kept.
		status, msg = http.StatusForbidden, "no price for the model the request would be sent to: the tenant's spend cap cannot be kept"
		c.outcome = "no_price"
	case errors.Is(err, ratelimit.ErrNoSlot), errors.Is(err, ratelimit.ErrQueueFull):
		// Never sent: the upstream's limit on requests in flight is
		// taken. Slots free as the requests ahead get their first
		// content, within seconds of a healthy upstream.
		status, msg = http.StatusServiceUnavailable, "too many requests in flight to the upstream: none came free in time"
		c.outcome = "no_slot"
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, ratelimit.ErrOverPace):
		// Never sent: the rate limits the upstream's headers announced
		// (every key's, for a pool) have no room for it in time.
		status, msg = http.StatusTooManyRequests, "the upstream's rate limits have no room for the request in time"
		c.outcome = "over_pace"
		w.Header().Set("Retry-After", "1")
	case !errors.As(err, &g):
	case g.Reason == rebound.StopBreakerOpen:
		status, msg = http.StatusServiceUnavailable, "upstream circuit open"
	case g.Reason == rebound.StopSideEffects:
		msg = "the upstream failed after it had the request, which may have been carried out: not sent again (an Idempotency-Key lets it be retried)"
	}
	writeError(w, c.dialect, status, msg)
}

// statusWriter notes the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController flush through.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// copyBuffers lends the buffers a response is copied through: without
// them each request would allocate its own 32 KiB. The pool holds
// pointers to arrays, which a slice converts to and from without an
// allocation (a pointer to a slice header would cost one on each Put).
type copyBuffers struct{}

const copyBufferSize = 32 << 10

var copyBufferPool = sync.Pool{New: func() any { return new([copyBufferSize]byte) }}

func (copyBuffers) Get() []byte { return copyBufferPool.Get().(*[copyBufferSize]byte)[:] }

func (copyBuffers) Put(b []byte) {
	if cap(b) >= copyBufferSize {
		copyBufferPool.Put((*[copyBufferSize]byte)(b[:copyBufferSize]))
	}
}
