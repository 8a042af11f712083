package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/rebound-go/rebound/internal/frontdoor"
	"github.com/rebound-go/rebound/internal/jsonscan"
)

// serveMCP hands a request for the server name to its handler, with its
// caller in the context: a request without a client token (where tokens
// are needed) gets a 401, and one of a tenant not given the server a
// 404, as if there were none. The body is read here, within the proxy's
// limits on its size and time, so that an event stream (a GET) is not
// cut by the body's deadline.
func (p *Proxy) serveMCP(w http.ResponseWriter, r *http.Request, name string, body frontdoor.BodyReader) {
	start := time.Now()
	caller := MCPCaller{}
	// refuse answers a request the proxy does not pass on, and logs it:
	// the lines of requests passed on are the handler's.
	refuse := func(status int, outcome, msg string) {
		writeRPCError(w, status, msg)
		p.logMCPRefusal(r, name, caller.Tenant, status, outcome, start)
	}
	i, ok := p.door.Match(r)
	if p.door.HasTokens() {
		if !ok {
			refuse(http.StatusUnauthorized, "unauthorized", "missing or wrong token (send it as Authorization: Bearer TOKEN)")
			return
		}
		caller.Holder = p.door.Holder(i)
	}
	var t *tenant
	if p.tenants != nil && len(p.tenants.list) > 0 {
		t = p.tenants.of(i)
		caller.Tenant = t.name
		tools, given := t.mcpTools(name)
		if !given {
			refuse(http.StatusNotFound, "server_not_given", "no MCP server "+name)
			return
		}
		caller.Tools = tools
	}
	if r.URL.Path != MCPPathPrefix+name {
		refuse(http.StatusNotFound, "no_route", "the MCP endpoint is "+MCPPathPrefix+name)
		return
	}
	if r.Body != nil && r.Body != http.NoBody {
		// Read as a model call's body is: its memory reserved from the
		// proxy's body memory as it comes, and held until the handler
		// has answered (a tool call may take minutes).
		held, err := readBody(r, body, p.memory, p.maxBody)
		switch {
		case errors.Is(err, errBodyMemory):
			w.Header().Set("Retry-After", "1")
			refuse(http.StatusServiceUnavailable, "body_memory", "the proxy holds as many request bodies as its memory allows; try again")
			return
		case errors.Is(err, errTooLarge):
			refuse(http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over %d bytes", p.maxBody))
			return
		case errors.Is(err, os.ErrDeadlineExceeded):
			refuse(http.StatusRequestTimeout, "client_error", "the request body did not come in time")
			return
		case err != nil:
			refuse(http.StatusBadRequest, "client_error", "could not read the body")
			return
		}
		if r.Method != http.MethodPost {
			// Only a POST carries a message: the body of an event
			// stream (a GET, held open for hours) or of a DELETE is read,
			// as net/http would read it, and let go at once.
			held.release()
			r.Body, r.ContentLength = http.NoBody, 0
		} else {
			defer held.release()
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(held.b)), int64(len(held.b))
		}
		if data := held.b; t != nil && data != nil && isToolCall(data) {
			if t.pacer != nil && !p.admitToolCall(w, r, t) {
				if r.Context().Err() == nil {
					p.logMCPRefusal(r, name, t.name, http.StatusTooManyRequests, "tenant_rate_limit", start)
				}
				return
			}
			t.toolCalls.Add(1)
		}
	}
	p.mcp.handlers[name].ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), mcpCallerKey{}, caller)))
}

var methodNames = jsonscan.NewNames("method")

// isToolCall reports whether a POST's body is a tools/call, its method
// read by its exact key as the relay reads it. A body whose method cannot
// be read so (given twice, or spelled another way, which the relay
// refuses) is counted as one: a client must not pass a call past its
// tenant's rate by spelling.
func isToolCall(data []byte) bool {
	var s jsonscan.Scanner
	s.Reset(data)
	if s.Next() != jsonscan.Object {
		return false
	}
	var method jsonscan.Span
	for m := s.Object(methodNames); m.Next(); {
		if v := s.Skip(); m.Name() == 0 {
			method = v
		}
	}
	if s.Err() != nil {
		return true
	}
	if !method.Set() || data[method.Lo] != '"' {
		return false
	}
	var buf [16]byte
	return string(s.Text(buf[:0], method)) == "tools/call"
}

// logMCPRefusal writes the access line of a request to the MCP server
// name that the proxy answered itself (status, outcome) rather than pass
// on: the schema of the handler's lines ("kind":"mcp"; no attempt made),
// never a body.
func (p *Proxy) logMCPRefusal(r *http.Request, name, tenant string, status int, outcome string, start time.Time) {
	attrs := []slog.Attr{
		slog.String("kind", "mcp"), slog.String("server", name), slog.String("method", r.Method),
		slog.String("path", r.URL.Path), slog.Int("attempts", 0), slog.Int("status", status), slog.String("outcome", outcome),
		slog.Float64("latency_ms", float64(time.Since(start).Microseconds())/1000),
	}
	if tenant != "" {
		attrs = append(attrs, slog.String("tenant", tenant))
	}
	p.log.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs...)
}

// admitToolCall holds a tool call to its tenant's requests_per_minute, as
// a model call is held (admitTenant): it waits up to TenantMaxWait, then
// gets a 429 with Retry-After, counted as the tenant's refusal. It reports
// whether the call goes on.
func (p *Proxy) admitToolCall(w http.ResponseWriter, r *http.Request, t *tenant) bool {
	ctx, cancel := context.WithTimeout(r.Context(), TenantMaxWait)
	err := t.pacer.Wait(ctx, 0) // a tool call spends no model tokens
	cancel()
	if err == nil {
		return true
	}
	if r.Context().Err() != nil {
		return false // the client left
	}
	secs := t.retryAfter(1)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeRPCError(w, http.StatusTooManyRequests, fmt.Sprintf("tenant %q is over its rate limit (%s); try again in %d s", t.name, t.limits(), secs))
	t.refused[refusedRateLimit].Add(1)
	return false
}
