package proxyrun

import (
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound/proxy"
)

// liveProxy is the server's handler: the Proxy of the config loaded last.
// A request is served whole by the Proxy it found, so a reload never
// changes the config under a request in flight.
type liveProxy struct{ atomic.Pointer[proxy.Proxy] }

func (l *liveProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.Load().ServeHTTP(w, r) }

// reload reads the config file anew and, if it is good, serves a Proxy
// for it that keeps the live one's state (proxy.Proxy.Reload), and its MCP
// servers whose config is unchanged (those it removes or changes finish
// their calls in flight for up to grace); if not, it
// logs why in one line and the live one stays. Without a file it logs
// that there is nothing to re-read: SIGHUP is caught all the same, since
// its default action would end the process.
func (l *liveProxy) reload(file string, grace time.Duration, logger *slog.Logger) {
	if file == "" {
		logger.Warn("SIGHUP ignored: there is no --config to re-read")
		return
	}
	data, err := os.ReadFile(file)
	var p *proxy.Proxy
	if err == nil {
		var c *proxy.FileConfig
		if c, err = proxy.ParseConfig(data, os.Getenv); err == nil {
			p, err = l.Load().Reload(c)
		}
	}
	if err != nil {
		// One log line, even for a file with several mistakes.
		logger.Error("config refused", "error", strings.ReplaceAll(err.Error(), "\n", "; "), "live_version", l.Load().ConfigVersion())
		return
	}
	l.Store(p)
	// The MCP servers the config removed or changed take no new
	// sessions, finish their calls, and end; the others go on.
	p.CloseReplaced(grace)
	logger.Info("config loaded", "version", p.ConfigVersion())
}
