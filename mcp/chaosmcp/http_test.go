package chaosmcp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// statuses records the status of every response an HTTP client gets.
type statuses struct {
	mu  sync.Mutex
	got []int
}

func (s *statuses) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(r)
	if err == nil {
		s.mu.Lock()
		s.got = append(s.got, resp.StatusCode)
		s.mu.Unlock()
	}
	return resp, err
}

func (s *statuses) last() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.got[len(s.got)-1]
}

// connectHTTP connects the SDK's client to the server at url.
func connectHTTP(t *testing.T, url string, rt http.RoundTripper) *mcp.ClientSession {
	t.Helper()
	tr := &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func counts(t *testing.T, url string) map[string]int {
	t.Helper()
	resp, err := http.Get(url + "/chaos/counts")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var c map[string]int
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestLoseSessionsEveryAnswers404AndDoesNotRun(t *testing.T) {
	srv, err := New(Config{LoseSessionsEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	var st statuses
	cs := connectHTTP(t, hs.URL+"/mcp", &st)
	for i := range 2 {
		if _, err := callTool(t.Context(), cs, ToolAppend, "k", "x"); err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
	}
	if _, err := callTool(t.Context(), cs, ToolAppend, "k", "x"); !errors.Is(err, mcp.ErrSessionMissing) {
		t.Fatalf("the third call: %v, want the SDK's ErrSessionMissing", err)
	}
	if s := st.last(); s != http.StatusNotFound {
		t.Errorf("the third call was answered %d, want 404", s)
	}
	if c := counts(t, hs.URL); !mapsEqual(c, map[string]int{ToolAppend: 2}) {
		t.Errorf("counts %v, want 2 appends: the refused call did not run", c)
	}
	// A new session works, and the count of calls goes on: its third call
	// overall is the sixth.
	cs = connectHTTP(t, hs.URL+"/mcp", &st)
	for range 2 {
		if _, err := callTool(t.Context(), cs, ToolLookup, "k", ""); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := callTool(t.Context(), cs, ToolLookup, "k", ""); !errors.Is(err, mcp.ErrSessionMissing) {
		t.Errorf("the sixth call: %v, want ErrSessionMissing", err)
	}
}

func TestLoseSessionsForgetsEverySession(t *testing.T) {
	srv, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	a, b := connectHTTP(t, hs.URL+"/mcp", http.DefaultTransport), connectHTTP(t, hs.URL+"/mcp", http.DefaultTransport)
	srv.LoseSessions()
	for _, cs := range []*mcp.ClientSession{a, b} {
		if _, err := callTool(t.Context(), cs, ToolSet, "k", "v"); !errors.Is(err, mcp.ErrSessionMissing) {
			t.Errorf("a call after LoseSessions: %v, want ErrSessionMissing", err)
		}
	}
	if n := len(slices.Collect(srv.current().server.Sessions())); n != 0 {
		t.Errorf("%d sessions after LoseSessions", n)
	}
}

func TestServeHTTPServesOnlyItsPaths(t *testing.T) {
	srv, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	for _, path := range []string{"/", "/mcp/x", "/chaos/stats"} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
	if c := counts(t, hs.URL); len(c) != 0 {
		t.Errorf("counts of a new server: %v", c)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Closing a session waits for its calls, so LoseSessions ends them first:
// a slow call in flight ends, unrun, and LoseSessions returns.
func TestLoseSessionsEndsCallsInFlight(t *testing.T) {
	srv, err := New(Config{Slow: time.Hour, Progress: true})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	inFlight := make(chan struct{}, 1)
	tr := &mcp.StreamableClientTransport{Endpoint: hs.URL + "/mcp"}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			select {
			case inFlight <- struct{}{}:
			default:
			}
		},
	}).Connect(t.Context(), tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	done := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: ToolAppend, Arguments: map[string]any{"key": "k", "value": "x"}}
		params.SetProgressToken("p")
		_, err := cs.CallTool(t.Context(), params)
		done <- err
	}()
	<-inFlight
	srv.LoseSessions()
	if err := <-done; err == nil {
		t.Error("a call in flight when its session was lost answered")
	}
	if n := srv.Counts()[ToolAppend]; n != 0 {
		t.Errorf("the call cut short ran %d times", n)
	}
}
