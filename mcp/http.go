package reboundmcp

import (
	"context"
	"net/http"
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
	st := &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc, MaxRetries: -1}
	return st.Connect(ctx)
}
