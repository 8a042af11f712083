package reboundmcp

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rebound-go/rebound"
)

// dialHTTP opens a streamable HTTP connection to endpoint, with rebound's
// Transport under the client: every POST counts as side-effecting there,
// so the engine sends one again only when it provably never ran (a refused
// connection, a 429 or 503); resending a request that may have run is this
// package's decision, made by what the request is.
func dialHTTP(ctx context.Context, endpoint string, client *http.Client, o *Options) (mcp.Connection, error) {
	hc := &http.Client{}
	if client != nil {
		*hc = *client
	}
	// A call's stream may stay silent as long as the idle timeout allows;
	// the engine's own bounds on silence must not cut it sooner.
	lookahead := 24 * time.Hour
	if idle := o.idleTimeout(); idle > 0 {
		lookahead = idle + time.Minute
	}
	hc.Transport = &rebound.Transport{
		Base:            hc.Transport,
		Policy:          o.Policy,
		SideEffects:     func(r *http.Request) bool { return r.Method == http.MethodPost },
		StreamLookahead: lookahead,
		StreamStall:     -1,
	}
	hc.Transport = sessionCheck{hc.Transport}
	st := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}
	return st.Connect(ctx)
}

// sessionCheckBytes bounds how much of a 400's body is read to find
// whether it speaks of the session.
const sessionCheckBytes = 4 << 10

// sessionCheck turns a 400 to a request that carried a session ID, whose
// body says the session is missing, invalid or unknown (as the official
// TypeScript SDK's servers answer a session they do not know, often
// without an ID the SDK's client can read), into the spec's 404, which the
// SDK's client reports as mcp.ErrSessionMissing.
type sessionCheck struct{ base http.RoundTripper }

func (s sessionCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := s.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusBadRequest || req.Header.Get("Mcp-Session-Id") == "" {
		return resp, err
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, sessionCheckBytes))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if saysSessionLost(strings.ToLower(string(head))) {
		resp.StatusCode, resp.Status = http.StatusNotFound, "404 Not Found"
	}
	return resp, nil
}
