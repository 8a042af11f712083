package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound/internal/header"
)

func newServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return s
}

// serve sends one in-memory request to s and returns the recorded response.
func serve(s *Server, method, target, mode string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	if mode != "" {
		req.Header.Set(HeaderMode, mode)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

func decodeError(t *testing.T, body string) errorDetail {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return e.Error
}

func TestModes(t *testing.T) {
	tests := []struct {
		mode       string
		status     int
		retryAfter string
	}{
		{ModeDown, 503, ""},
		{ModeBadRequest, 400, ""},
		{ModeRetryAfter, 429, "2"},
	}
	s := newServer(t, Config{RetryAfter: 1500 * time.Millisecond})
	for _, tt := range tests {
		rec := serve(s, "POST", "/v1/chat/completions", tt.mode)
		if rec.Code != tt.status {
			t.Errorf("mode %s: status %d, want %d", tt.mode, rec.Code, tt.status)
		}
		if got := rec.Header().Get("Retry-After"); got != tt.retryAfter {
			t.Errorf("mode %s: Retry-After %q, want %q", tt.mode, got, tt.retryAfter)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Errorf("mode %s: Content-Type %q", tt.mode, ct)
		}
		e := decodeError(t, rec.Body.String())
		want := errorDetail{
			Message: fmt.Sprintf("chaos: injected %d %s", tt.status, http.StatusText(tt.status)),
			Type:    "chaos_injected",
			Code:    tt.mode,
		}
		if e != want {
			t.Errorf("mode %s: error %+v, want %+v", tt.mode, e, want)
		}
	}

	rec := serve(s, "GET", "/", ModeOK)
	if rec.Code != 200 || rec.Body.String() != `{"ok":true,"request":3}`+"\n" {
		t.Errorf("mode ok: %d %q", rec.Code, rec.Body)
	}
}

func TestRandomModeSendsNoWaitHint(t *testing.T) {
	s := newServer(t, Config{FailRate: 1})
	for range 50 {
		rec := serve(s, "GET", "/", "")
		if rec.Code == 200 {
			t.Fatal("FailRate 1 let a request succeed")
		}
		if h := rec.Header().Get("Retry-After"); h != "" {
			t.Fatalf("status %d carries Retry-After %q", rec.Code, h)
		}
		if e := decodeError(t, rec.Body.String()); e.Code != ModeRandom {
			t.Fatalf("code %q, want %q", e.Code, ModeRandom)
		}
	}
}

func TestRequestMode(t *testing.T) {
	s := newServer(t, Config{Mode: ModeDown})
	tests := []struct {
		name, header, target string
		status               int
	}{
		{"config", "", "/", 503},
		{"query", "", "/?chaos_mode=ok", 200},
		{"header", "badreq", "/", 400},
		{"header over query", "ok", "/?chaos_mode=badreq", 200},
	}
	for _, tt := range tests {
		if rec := serve(s, "GET", tt.target, tt.header); rec.Code != tt.status {
			t.Errorf("%s: status %d, want %d", tt.name, rec.Code, tt.status)
		}
	}
}

func TestUnknownMode(t *testing.T) {
	s := newServer(t, Config{})
	rec := serve(s, "GET", "/", "flaky")
	if rec.Code != 400 {
		t.Fatalf("status %d, want 400", rec.Code)
	}
	e := decodeError(t, rec.Body.String())
	if !strings.Contains(e.Message, `"flaky"`) || e.Code != "flaky" {
		t.Errorf("error %+v does not name the mode", e)
	}
	if st := s.Stats(); st.Requests != 1 || st.ByStatus["400"] != 1 {
		t.Errorf("stats %+v, want one 400", st)
	}
}

func TestStatsAndReset(t *testing.T) {
	s := newServer(t, Config{Mode: ModeOK})
	srv := httptest.NewServer(s)
	defer srv.Close()

	for _, mode := range []string{"ok", "ok", "down", "retryafter"} {
		resp, err := http.Get(srv.URL + "/?chaos_mode=" + mode)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(srv.URL + StatsPath)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := `{"requests":4,"by_status":{"200":2,"429":1,"503":1},"input_tokens":0,"output_tokens":0,` +
		`"tallies":{"":{"":{"requests":4,"input_tokens":0,"output_tokens":0}}}}` + "\n"
	if resp.StatusCode != 200 || string(body) != want {
		t.Errorf("GET %s: %d %q, want 200 %q", StatsPath, resp.StatusCode, body, want)
	}

	for _, c := range []struct{ method, path, allow string }{
		{"POST", StatsPath, "GET"},
		{"GET", ResetPath, "POST"},
	} {
		rec := serve(s, c.method, c.path, "")
		if rec.Code != 405 || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s: %d Allow %q, want 405 Allow %q", c.method, c.path, rec.Code, rec.Header().Get("Allow"), c.allow)
		}
	}

	resp, err = http.Post(srv.URL+ResetPath, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		t.Errorf("POST %s: %d, want 204", ResetPath, resp.StatusCode)
	}
	if st := s.Stats(); st.Requests != 0 || len(st.ByStatus) != 0 {
		t.Errorf("stats after reset %+v, want zero", st)
	}
	if rec := serve(s, "GET", "/", ""); rec.Body.String() != `{"ok":true,"request":0}`+"\n" {
		t.Errorf("first request after reset: %q, want sequence number 0", rec.Body)
	}
}

func statuses(s *Server, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = serve(s, "GET", "/", "").Code
	}
	return out
}

func TestDeterminism(t *testing.T) {
	// Pinned so that a benchmark run with seed 1 keeps meaning the same thing.
	want := []int{429, 500, 200, 200, 200, 503, 500, 429, 429, 429, 503, 200}
	a := newServer(t, Config{Seed: 1})
	if got := statuses(a, len(want)); !slices.Equal(got, want) {
		t.Fatalf("seed 1: %v, want %v", got, want)
	}
	a.Reset()
	if got := statuses(a, len(want)); !slices.Equal(got, want) {
		t.Errorf("seed 1 after Reset: %v, want %v", got, want)
	}
	b := newServer(t, Config{Seed: 1})
	c := newServer(t, Config{Seed: 2})
	if x, y := statuses(b, 200), statuses(c, 200); slices.Equal(x, y) {
		t.Error("seeds 1 and 2 gave the same 200 outcomes")
	}
}

func TestRates(t *testing.T) {
	const n = 20000
	for _, rate := range []float64{0.35, 0.8} {
		s := newServer(t, Config{Seed: 42, FailRate: rate})
		count := map[int]int{}
		for i := range uint64(n) {
			count[s.randomStatus(i)]++
		}
		failed := n - count[200]
		near := func(what string, got, want, tol float64) {
			if math.Abs(got-want) > tol {
				t.Errorf("rate %v: %s %.4f, want %.2f±%.2f", rate, what, got, want, tol)
			}
		}
		near("failure rate", float64(failed)/n, rate, 0.02)
		near("429 share", float64(count[429])/float64(failed), 0.6, 0.03)
		near("503 share", float64(count[503])/float64(failed), 0.3, 0.03)
		near("500 share", float64(count[500])/float64(failed), 0.1, 0.03)
		if len(count) != 4 {
			t.Errorf("rate %v: statuses %v, want only 200, 429, 503, 500", rate, count)
		}
	}
}

func TestNew(t *testing.T) {
	bad := []struct {
		cfg  Config
		want string
	}{
		{Config{Mode: "x"}, `chaos: unknown mode "x" (want ok, random, down, badreq, retryafter, slow, reset, overload, quota, context, stream-cut, lost-reply, text)`},
		{Config{Profile: "cohere"}, `chaos: unknown profile "cohere" (want plain, openai, anthropic, gemini, azure, bedrock, local)`},
		{Config{FailRate: -0.1}, "chaos: fail rate -0.1 outside [0, 1]"},
		{Config{FailRate: 1.5}, "chaos: fail rate 1.5 outside [0, 1]"},
		{Config{FailRate: math.NaN()}, "chaos: fail rate NaN outside [0, 1]"},
		{Config{RetryAfter: -time.Second}, "chaos: negative retry-after -1s"},
		{Config{SlowDelay: -time.Second}, "chaos: negative slow delay -1s"},
		// Beyond a year a hint is absurd, and near the largest Duration
		// rounding it up to whole seconds would wrap around.
		{Config{RetryAfter: MaxRetryAfter + time.Nanosecond}, "chaos: retry-after 8760h0m0.000000001s is beyond a year (want at most 8760h0m0s)"},
		{Config{RetryAfter: math.MaxInt64}, "chaos: retry-after 2562047h47m16.854775807s is beyond a year (want at most 8760h0m0s)"},
	}
	for _, b := range bad {
		if _, err := New(b.cfg); err == nil || err.Error() != b.want {
			t.Errorf("New(%+v) = %v, want %q", b.cfg, err, b.want)
		}
	}

	// A year is a long hint, but a real one: the longest rebound takes.
	if MaxRetryAfter != header.MaxHint {
		t.Errorf("MaxRetryAfter %v, the longest hint rebound takes %v", MaxRetryAfter, header.MaxHint)
	}
	if s := newServer(t, Config{RetryAfter: MaxRetryAfter}); s.retryAfter != 365*24*3600 {
		t.Errorf("RetryAfter of a year: hint %d s, want %d", s.retryAfter, 365*24*3600)
	}

	s := newServer(t, Config{})
	want := Config{Mode: ModeRandom, FailRate: 0.35, RetryAfter: time.Second, SlowDelay: time.Second, Profile: ProfilePlain, KeyWindow: DefaultKeyWindow}
	if !reflect.DeepEqual(s.cfg, want) || s.retryAfter != 1 {
		t.Errorf("defaults %+v Retry-After %d, want %+v 1", s.cfg, s.retryAfter, want)
	}
}

func TestSlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newServer(t, Config{Mode: ModeSlow, SlowDelay: 3 * time.Second})
		start := time.Now()
		rec := serve(s, "GET", "/", "")
		if d := time.Since(start); d != 3*time.Second {
			t.Errorf("answered after %v, want 3s", d)
		}
		if rec.Code != 200 {
			t.Errorf("status %d, want 200", rec.Code)
		}

		ctx, cancel := context.WithCancel(t.Context())
		req := httptest.NewRequestWithContext(ctx, "GET", "/", nil)
		rec = httptest.NewRecorder()
		done := make(chan struct{})
		start = time.Now()
		go func() {
			s.ServeHTTP(rec, req)
			close(done)
		}()
		synctest.Wait()
		cancel()
		<-done
		if d := time.Since(start); d != 0 {
			t.Errorf("canceled request returned after %v, want at once", d)
		}
		if rec.Body.Len() != 0 {
			t.Errorf("canceled request got body %q", rec.Body)
		}
	})
}

func TestResetMode(t *testing.T) {
	s := newServer(t, Config{Mode: ModeReset})
	srv := httptest.NewServer(s)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got status %d, want a connection error", resp.StatusCode)
	}
	if st := s.Stats(); st.Requests != 1 || st.ByStatus["reset"] != 1 {
		t.Errorf("stats %+v, want one reset", st)
	}

	// Without a connection to take over, the handler aborts.
	defer func() {
		if r := recover(); r != http.ErrAbortHandler {
			t.Errorf("recovered %v, want http.ErrAbortHandler", r)
		}
	}()
	serve(s, "GET", "/", "")
}

func TestConcurrent(t *testing.T) {
	s := newServer(t, Config{Seed: 3})
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() { serve(s, "GET", "/", "") })
	}
	wg.Go(func() { s.Stats() })
	wg.Wait()
	st := s.Stats()
	sum := 0
	for _, v := range st.ByStatus {
		sum += v
	}
	if st.Requests != 64 || sum != 64 {
		t.Errorf("stats %+v, want 64 requests", st)
	}
	// The multiset of outcomes is fixed even though the order is not.
	s.Reset()
	want := map[int]int{}
	for _, c := range statuses(s, 64) {
		want[c]++
	}
	for k, v := range st.ByStatus {
		if code, _ := strconv.Atoi(k); want[code] != v {
			t.Errorf("concurrent outcomes %v differ from sequential %v", st.ByStatus, want)
			break
		}
	}
}
