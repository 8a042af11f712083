package front

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rebound-go/rebound/internal/frontdoor"
)

// fake is a server behind the front: it writes refusals as plain text,
// with its status, so that a test sees what the front asked for.
type fake struct {
	door     *frontdoor.Door
	draining atomic.Bool
	metrics  http.Handler
	admin    Admin
}

func (f *fake) Door() *frontdoor.Door { return f.door }
func (f *fake) Refuse(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	http.Error(w, "fake: "+msg, status)
}
func (f *fake) Draining() bool        { return f.draining.Load() }
func (f *fake) Metrics() http.Handler { return f.metrics }
func (f *fake) AdmitAdmin(w http.ResponseWriter, r *http.Request) bool {
	return f.admin.Admit(w, r, func(w http.ResponseWriter, status int, msg string) { f.Refuse(w, r, status, msg) })
}

func newFake(t *testing.T, o frontdoor.Options) *fake {
	t.Helper()
	d, err := frontdoor.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return &fake{door: d, admin: Admin{Server: "fake", Pages: "/metrics"}}
}

// local makes r come in on a loopback address, as frontdoor.Local asks.
func local(r *http.Request) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}))
}

func enter(m Mounted, r *http.Request) (bool, *httptest.ResponseRecorder) {
	w := httptest.NewRecorder()
	return Enter(m, w, r), w
}

func TestEnterAnswersHealthAndReadinessWithoutAToken(t *testing.T) {
	f := newFake(t, frontdoor.Options{Tokens: []string{"client-token-1"}})
	for _, c := range []struct {
		path, body string
		draining   bool
		status     int
	}{
		{HealthPath, `{"status":"ok"}`, false, 200},
		{ReadyPath, `{"status":"ready"}`, false, 200},
		{HealthPath, `{"status":"ok"}`, true, 200},
		{ReadyPath, `{"status":"draining"}`, true, 503},
	} {
		f.draining.Store(c.draining)
		answered, w := enter(f, httptest.NewRequest("GET", "http://proxy.example"+c.path, nil))
		if !answered || w.Code != c.status || strings.TrimSpace(w.Body.String()) != c.body || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s (draining %v): answered %v, %d %q %q; want %d %s", c.path, c.draining, answered, w.Code, w.Body, w.Header().Get("Content-Type"), c.status, c.body)
		}
	}
}

func TestEnterHasTheServerRefuseWhatTheDoorRefuses(t *testing.T) {
	f := newFake(t, frontdoor.Options{})
	for _, r := range []*http.Request{
		httptest.NewRequest("GET", "http://rebound.attacker.example/healthz", nil),
		func() *http.Request {
			r := httptest.NewRequest("POST", "http://127.0.0.1/mcp", nil)
			r.Header.Set("Origin", "https://evil.example")
			return r
		}(),
	} {
		answered, w := enter(f, r)
		if !answered || w.Code != http.StatusForbidden || !strings.HasPrefix(w.Body.String(), "fake: ") {
			t.Errorf("%s %s: answered %v, %d %q; want the server's 403", r.Host, r.Header.Get("Origin"), answered, w.Code, w.Body)
		}
	}
	answered, w := enter(f, httptest.NewRequest("POST", "http://localhost/mcp", nil))
	if answered || w.Code != 200 {
		t.Errorf("a request for the server: answered %v (%d)", answered, w.Code)
	}
}

func TestEnterServesMetricsToTheAdminOnly(t *testing.T) {
	f := newFake(t, frontdoor.Options{Tokens: []string{"client-token-1"}})
	if answered, _ := enter(f, local(httptest.NewRequest("GET", "http://localhost/metrics", nil))); answered {
		t.Fatal("/metrics answered by a front whose server has none")
	}
	f.metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("rebound_calls 1\n")) })
	f.admin.Token = frontdoor.NewAdminToken("admin-token-2")
	for _, c := range []struct {
		name   string
		r      *http.Request
		status int
	}{
		{"from this machine", local(httptest.NewRequest("GET", "http://localhost/metrics", nil)), 200},
		{"with the admin token", withAuth(httptest.NewRequest("GET", "http://proxy.example/metrics", nil), "Bearer admin-token-2"), 200},
		{"with a client token", withAuth(httptest.NewRequest("GET", "http://proxy.example/metrics", nil), "Bearer client-token-1"), 401},
		{"with none", httptest.NewRequest("GET", "http://proxy.example/metrics", nil), 401},
	} {
		answered, w := enter(f, c.r)
		if !answered || w.Code != c.status {
			t.Errorf("%s: answered %v, %d %q; want %d", c.name, answered, w.Code, w.Body, c.status)
		}
		if c.status == 200 && w.Body.String() != "rebound_calls 1\n" {
			t.Errorf("%s: %q", c.name, w.Body)
		}
		if c.status == 401 && !strings.Contains(w.Header().Get("WWW-Authenticate"), `realm="fake"`) {
			t.Errorf("%s: WWW-Authenticate %q", c.name, w.Header().Get("WWW-Authenticate"))
		}
	}
	f.admin.Token = frontdoor.AdminToken{}
	answered, w := enter(f, httptest.NewRequest("GET", "http://proxy.example/metrics", nil))
	if !answered || w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "no admin token") {
		t.Errorf("no admin token, from beyond: answered %v, %d %q; want 403 saying why", answered, w.Code, w.Body)
	}
}

func withAuth(r *http.Request, v string) *http.Request {
	r.Header.Set("Authorization", v)
	return r
}
