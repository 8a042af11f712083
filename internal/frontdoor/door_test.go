package frontdoor

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func request(host string, header ...string) *http.Request {
	r := httptest.NewRequest("POST", "http://"+host+"/mcp?x=1", nil)
	r.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// TestRefusalHostWithoutTokens: without tokens only loopback host names
// and allowed hosts pass, with any port; a name that only starts like a
// loopback one does not.
func TestRefusalHostWithoutTokens(t *testing.T) {
	d, err := New(Options{AllowHosts: []string{"Box.Internal", "[fd00::1]"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"localhost", "LOCALHOST:9", "127.0.0.1", "127.2.3.4:80", "[::1]", "[::1]:8080", "box.internal:1", "[fd00::1]:2"} {
		if why := d.refusal(request(host)); why != "" {
			t.Errorf("Host %s refused: %s", host, why)
		}
	}
	for _, host := range []string{"example.com", "localhost.example.com", "127.0.0.1.nip.io", "0.0.0.0", "[::2]:1", "box.internal.evil"} {
		if why := d.refusal(request(host)); why == "" {
			t.Errorf("Host %s let through without tokens", host)
		}
	}
}

// TestRefusalHostWithTokens: with tokens any Host passes (the token
// guards), but an Origin not allowed is still refused.
func TestRefusalHostWithTokens(t *testing.T) {
	d, err := New(Options{Tokens: []string{" tok "}, AllowOrigins: []string{"https://App.example.com:443"}})
	if err != nil {
		t.Fatal(err)
	}
	if why := d.refusal(request("example.com")); why != "" {
		t.Errorf("Host example.com refused with tokens: %s", why)
	}
	if why := d.refusal(request("example.com", "Origin", "https://app.example.com")); why != "" {
		t.Errorf("allowed origin refused: %s", why)
	}
	for _, h := range [][]string{
		{"Origin", "https://evil.example"},
		{"Origin", "null"},
		{"Origin", "https://app.example.com", "Origin", "https://app.example.com"},
		{"Sec-Fetch-Site", "cross-site"},
	} {
		if why := d.refusal(request("example.com", h...)); why == "" {
			t.Errorf("%v let through", h)
		}
	}
	if why := d.refusal(request("example.com", "Sec-Fetch-Site", "same-origin")); why != "" {
		t.Errorf("same-origin refused: %s", why)
	}
}

// TestNewRefusesBadOptions: a bad allowed host or origin, or "*"
// without tokens, is a one-line error naming it.
func TestNewRefusesBadOptions(t *testing.T) {
	for _, o := range []Options{
		{AllowHosts: []string{""}},
		{AllowHosts: []string{"a/b"}},
		{AllowHosts: []string{"host:80"}},
		{AllowOrigins: []string{"app.example.com"}},
		{AllowOrigins: []string{"https://a.example/path"}},
		{AllowOrigins: []string{"*"}},
	} {
		_, err := New(o)
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("New(%+v) = %v, want a one-line error", o, err)
		}
	}
	if _, err := New(Options{Tokens: []string{"t"}, AllowOrigins: []string{"*"}}); err != nil {
		t.Errorf(`"*" with tokens: %v`, err)
	}
}

// TestAdmitWhereClientsSendKeys: a token is found wherever a client
// sends its key, a wrong or missing one is not admitted, and without
// tokens every request is.
func TestAdmitWhereClientsSendKeys(t *testing.T) {
	d, _ := New(Options{Tokens: []string{"tok-1", "", "tok-2"}})
	for _, h := range [][]string{
		{"Authorization", "Bearer tok-1"},
		{"Authorization", "bearer  tok-2"},
		{"X-Api-Key", "tok-1"},
		{"X-Goog-Api-Key", "tok-2"},
		{"Api-Key", "tok-1"},
		{"Authorization", "Basic tok-1", "X-Api-Key", "tok-2"},
	} {
		if !d.Admit(request("h", h...)) {
			t.Errorf("%v not admitted", h)
		}
	}
	q := request("h")
	q.URL.RawQuery = "key=tok-2"
	if !d.Admit(q) {
		t.Error("?key= not admitted")
	}
	for _, h := range [][]string{nil, {"Authorization", "tok-1"}, {"Authorization", "Bearer tok-10"}, {"Authorization", "Bearer "}} {
		if d.Admit(request("h", h...)) {
			t.Errorf("%v admitted", h)
		}
	}
	open, _ := New(Options{})
	if !open.Admit(request("h")) || open.HasTokens() || !d.HasTokens() {
		t.Error("a door without tokens must admit every request and say it has none")
	}
}

// TestDropKeys: every place Admit looks is emptied, the rest kept.
func TestDropKeys(t *testing.T) {
	r := request("h", "Authorization", "Bearer t", "X-Api-Key", "k", "Api-Key", "k", "X-Goog-Api-Key", "k", "Accept", "x")
	r.URL.RawQuery = "key=k&alt=sse"
	DropKeys(r.Header, r.URL)
	d, _ := New(Options{Tokens: []string{"k", "t"}})
	if d.Admit(r) || r.Header.Get("Accept") != "x" || r.URL.RawQuery != "alt=sse" {
		t.Errorf("after DropKeys: header %v, query %q", r.Header, r.URL.RawQuery)
	}
}

// TestEnter: a refused request gets a reason and nothing written; a
// pre-flight is answered with what it may send, only the asked headers
// that are tokens; an answer gets CORS headers only when the request had
// an allowed Origin; an upstream's own CORS headers go.
func TestEnter(t *testing.T) {
	d, _ := New(Options{AllowOrigins: []string{"http://localhost:3000"}})
	w := httptest.NewRecorder()
	if why, answered := d.Enter(w, request("localhost", "Origin", "https://evil.example")); why == "" || answered || len(w.Header()) != 0 {
		t.Errorf("foreign origin: %q, answered %v, headers %v", why, answered, w.Header())
	}
	r := request("localhost", "Origin", "http://localhost:3000", "Access-Control-Request-Method", "POST",
		"Access-Control-Request-Headers", "content-type, mcp-session-id, bad header,")
	r.Method = http.MethodOptions
	w = httptest.NewRecorder()
	why, answered := d.Enter(w, r)
	h := w.Result().Header
	if why != "" || !answered || w.Code != 204 || h.Get("Access-Control-Allow-Origin") != "http://localhost:3000" ||
		h.Get("Access-Control-Allow-Headers") != "content-type, mcp-session-id" {
		t.Errorf("pre-flight: %q, answered %v, %d %v", why, answered, w.Code, h)
	}
	w = httptest.NewRecorder()
	if why, answered := d.Enter(w, request("localhost", "Origin", "http://localhost:3000")); why != "" || answered ||
		w.Header().Get("Access-Control-Allow-Origin") != "http://localhost:3000" {
		t.Errorf("allowed origin: %q, answered %v, headers %v", why, answered, w.Header())
	}
	w = httptest.NewRecorder()
	if why, answered := d.Enter(w, request("localhost")); why != "" || answered || len(w.Header()) != 0 {
		t.Errorf("no origin: %q, answered %v, headers %v", why, answered, w.Header())
	}
	up := http.Header{"Access-Control-Allow-Origin": {"*"}, "access-control-allow-credentials": {"true"}, "Content-Type": {"x"}}
	StripCORS(up)
	if len(up) != 1 {
		t.Errorf("after StripCORS: %v", up)
	}
}

// TestMatchSaysWhichTokenMatched: Match gives the index in Options.Tokens
// of the token a request carries, blank entries keeping their places and
// matching nothing.
func TestMatchSaysWhichTokenMatched(t *testing.T) {
	d, err := New(Options{Tokens: []string{"tok-a", " ", "tok-b"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		header []string
		index  int
		ok     bool
	}{
		{[]string{"Authorization", "Bearer tok-a"}, 0, true},
		{[]string{"X-Api-Key", "tok-b"}, 2, true},
		{[]string{"Authorization", "Bearer  "}, 0, false},
		{[]string{"X-Api-Key", "tok-c"}, 0, false},
		{nil, 0, false},
	} {
		index, ok := d.Match(request("x", c.header...))
		if ok != c.ok || ok && index != c.index {
			t.Errorf("Match(%q) = %d, %v; want %d, %v", c.header, index, ok, c.index, c.ok)
		}
	}
	if empty, _ := New(Options{Tokens: []string{" "}}); empty.HasTokens() {
		t.Error("a Door of blank tokens only asks for tokens")
	}
}
