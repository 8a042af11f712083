package mcprun

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/rebound-go/rebound"
	reboundmcp "github.com/rebound-go/rebound/mcp"
	"github.com/rebound-go/rebound/proxy"
)

// The bounds on a server's client sessions, --max-sessions' and
// --session-timeout's defaults, which a server of rebound proxy's config
// has too.
const (
	defaultMaxSessions    = 32
	defaultSessionTimeout = 30 * time.Minute
)

// ProxyServer returns what makes the Handler of an MCP server of rebound
// proxy's config (proxy.Options.MCPServer, given the proxy's logger and
// observer): served at /mcp/NAME with reboundmcp's defaults, as rebound
// mcp's flags have them, its tool rules and trust in annotations from the
// config, its sessions bound to the caller the proxy found
// (proxy.MCPCallerFrom), their lines naming its tenant. A stdio server's
// own logs go to stderr, beside the proxy's.
func ProxyServer(stderr io.Writer) func(name string, spec proxy.MCPServerConfig, logger *slog.Logger, obs rebound.Observer) (http.Handler, error) {
	return func(name string, spec proxy.MCPServerConfig, logger *slog.Logger, obs rebound.Observer) (http.Handler, error) {
		s := Server{
			Command:        spec.Command,
			Upstream:       spec.URL,
			Stderr:         stderr,
			MaxSessions:    defaultMaxSessions,
			SessionTimeout: defaultSessionTimeout,
			Options: reboundmcp.Options{
				Name:              name,
				Tools:             spec.ToolKinds(),
				IgnoreAnnotations: !spec.Trusted(),
				Logger:            logger,
				Observer:          obs,
			},
			Caller: func(r *http.Request) proxy.MCPCaller {
				c, _ := proxy.MCPCallerFrom(r.Context())
				return c
			},
		}
		if len(spec.Command) > 0 {
			s.Env = spec.Environ(os.Getenv)
		}
		if len(spec.HeadersEnv) > 0 {
			s.Header = http.Header{}
			for h, v := range spec.HeadersEnv {
				s.Header.Set(h, os.Getenv(v))
			}
		}
		return NewHandler(s)
	}
}
