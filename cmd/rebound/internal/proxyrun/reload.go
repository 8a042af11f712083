package proxyrun

import (
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rebound-go/rebound/proxy"
)

// liveProxy is the server's handler: the Proxy of the config loaded last.
// A request is served whole by the Proxy it found, so a reload never
// changes the config under a request in flight.
type liveProxy struct{ atomic.Pointer[proxy.Proxy] }

func (l *liveProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) { l.Load().ServeHTTP(w, r) }

// reloadOnHangup re-reads file into live at each SIGHUP (without a file,
// it logs each as ignored: the default action of SIGHUP would end the
// process), until the returned stop is called; stop returns once a
// reload under way has ended.
func reloadOnHangup(file string, live *liveProxy, logger *slog.Logger) (stop func()) {
	hangups := make(chan os.Signal, 1)
	signal.Notify(hangups, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-hangups:
				if file == "" {
					logger.Warn("SIGHUP ignored: there is no --config to re-read")
					continue
				}
				live.reload(file, logger)
			}
		}
	})
	return sync.OnceFunc(func() {
		signal.Stop(hangups)
		close(done)
		wg.Wait()
	})
}

// reload reads the config file anew and, if it is good, serves a Proxy
// for it that keeps the live one's state (proxy.Proxy.Reload); if not, it
// logs why in one line and the live one stays.
func (l *liveProxy) reload(file string, logger *slog.Logger) {
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
	logger.Info("config loaded", "version", p.ConfigVersion())
}
