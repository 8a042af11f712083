package front

import (
	"io"
	"net/http"

	"github.com/rebound-go/rebound/internal/frontdoor"
)

// The paths the front answers itself, before the server behind it.
const (
	HealthPath  = "/healthz"
	ReadyPath   = "/readyz"
	MetricsPath = "/metrics"
)

// A Mounted server is what the front asks of the server behind it. Its
// methods are called for every request, so they are cheap: a server's
// rules may change under it (the proxy's at a reload), and are read as
// the request finds them.
type Mounted interface {
	// Door is who may call.
	Door() *frontdoor.Door
	// Refuse writes the door's refusal, a 403 saying why, as the
	// server's clients read errors.
	Refuse(w http.ResponseWriter, r *http.Request, status int, msg string)
	// Draining reports whether the server is draining: /readyz then
	// answers 503.
	Draining() bool
	// Metrics returns the handler of /metrics; nil, and /metrics is the
	// server's own path like any other.
	Metrics() http.Handler
	// AdmitAdmin reports whether r may see /metrics, and writes the
	// refusal if not (Admin.Admit is the rule).
	AdmitAdmin(w http.ResponseWriter, r *http.Request) bool
}

// Enter judges r for m before m serves it, and answers what the front
// answers itself: a refusal of the door's, a pre-flight, /healthz,
// /readyz and /metrics. It reports whether r was answered; if not, w has
// the CORS headers r's origin gets, and m goes on.
func Enter(m Mounted, w http.ResponseWriter, r *http.Request) (answered bool) {
	why, answered := m.Door().Enter(w, r)
	switch {
	case why != "":
		m.Refuse(w, r, http.StatusForbidden, why)
		return true
	case answered:
		return true // a pre-flight
	}
	switch r.URL.Path {
	case HealthPath:
		writeJSON(w, http.StatusOK, `{"status":"ok"}`)
		return true
	case ReadyPath:
		if m.Draining() {
			writeJSON(w, http.StatusServiceUnavailable, `{"status":"draining"}`)
		} else {
			writeJSON(w, http.StatusOK, `{"status":"ready"}`)
		}
		return true
	case MetricsPath:
		h := m.Metrics()
		if h == nil {
			return false
		}
		if m.AdmitAdmin(w, r) {
			h.ServeHTTP(w, r)
		}
		return true
	}
	return false
}

// Admin is the admin rule of a server: who may see its admin pages
// (/metrics, the proxy's status page). A request from this machine
// (frontdoor.Local) may, and one with the admin token; a client token
// opens nothing here.
type Admin struct {
	// Token opens the pages to requests from beyond the machine; its
	// zero value is none.
	Token frontdoor.AdminToken
	// Server names the server: in a browser's prompt for the token
	// ("rebound proxy"), and in a refusal when it has no token.
	Server string
	// Pages name the pages in a refusal ("the status page and /metrics").
	Pages string
}

// Admit reports whether r may see the admin pages. If not, refuse
// writes the refusal: a 401 that makes a browser prompt when there is an
// admin token, a 403 saying why when there is none.
func (a Admin) Admit(w http.ResponseWriter, r *http.Request, refuse func(w http.ResponseWriter, status int, msg string)) bool {
	if a.Token.Match(r) || frontdoor.Local(r) {
		return true
	}
	if !a.Token.Set() {
		refuse(w, http.StatusForbidden, a.Pages+" answer only requests from this machine: "+a.Server+" has no admin token (--admin-token-env)")
		return false
	}
	w.Header().Set("WWW-Authenticate", `Basic realm="`+a.Server+`", charset="UTF-8"`)
	refuse(w, http.StatusUnauthorized, "missing or wrong admin token (Authorization: Bearer TOKEN, or as the password when the browser asks); a client token does not open this page")
	return false
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body+"\n")
}
