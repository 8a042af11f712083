package rebound_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// handlerTransport serves requests with an http.Handler in memory: inside a
// synctest bubble, loopback network I/O would stall the fake clock. It
// records every response body it hands out, so tests can check that each
// was closed.
type handlerTransport struct {
	h      http.Handler
	mu     sync.Mutex // guards bodies
	bodies []*trackedBody
}

type trackedBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackedBody) Close() error { b.closed.Store(true); return nil }

func (t *handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	} else {
		req = req.Clone(req.Context()) // as a server sees it: never a nil body
		req.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	resp := rec.Result()
	body := &trackedBody{Reader: resp.Body}
	resp.Body = body
	t.mu.Lock()
	t.bodies = append(t.bodies, body)
	t.mu.Unlock()
	return resp, nil
}

func (t *handlerTransport) allClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range t.bodies {
		if !b.closed.Load() {
			return false
		}
	}
	return true
}

// script answers the n-th request with statuses[n] (the last one repeats)
// and records each request's body.
type script struct {
	mu       sync.Mutex // guards requests and bodies
	statuses []int
	header   http.Header
	body     string
	requests int
	bodies   []string
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	status := s.statuses[min(s.requests, len(s.statuses)-1)]
	s.requests++
	s.bodies = append(s.bodies, string(b))
	s.mu.Unlock()
	for k, v := range s.header {
		w.Header()[k] = v
	}
	w.WriteHeader(status)
	if status == http.StatusOK {
		fmt.Fprint(w, `{"ok":true}`)
		return
	}
	fmt.Fprintf(w, `{"error":{"message":"status %d %s"}}`, status, s.body)
}

func (s *script) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func TestTransportRetriesAndReplaysTheBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{statuses: []int{503, 502, 200}}
		ht := &handlerTransport{h: s}
		client := &http.Client{Transport: &rebound.Transport{Base: ht, Policy: rebound.Policy{BaseDelay: 100 * time.Millisecond, Jitter: rebound.JitterNone}}}
		for _, mk := range []func() io.Reader{
			func() io.Reader { return strings.NewReader(`{"model":"m"}`) },                 // GetBody set by NewRequest
			func() io.Reader { return io.MultiReader(strings.NewReader(`{"model":"m"}`)) }, // no GetBody: buffered
		} {
			s.requests, s.bodies = 0, nil
			start := time.Now()
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://provider.test/v1/chat", mk())
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(got) != `{"ok":true}` || s.count() != 3 {
				t.Fatalf("status %d body %q after %d requests", resp.StatusCode, got, s.count())
			}
			for i, b := range s.bodies {
				if b != `{"model":"m"}` {
					t.Fatalf("attempt %d sent body %q", i+1, b)
				}
			}
			if elapsed := time.Since(start); elapsed != 300*time.Millisecond {
				t.Fatalf("took %v, want 100ms + 200ms", elapsed)
			}
			if !ht.allClosed() {
				t.Fatal("a discarded response body was not closed")
			}
		}
	})
}

func TestTransportGivesBackTheLastResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		long := strings.Repeat("x", 100<<10) // beyond the 64 KiB the classifier reads
		s := &script{statuses: []int{503}, body: long}
		var events []rebound.Event
		p := rebound.Policy{BaseDelay: rebound.NoDelay, Observer: rebound.ObserverFunc(func(e rebound.Event) { events = append(events, e) })}
		ht := &handlerTransport{h: s}
		client := &http.Client{Transport: &rebound.Transport{Base: ht, Policy: p}}
		resp, err := client.Post("http://provider.test/", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want := fmt.Sprintf(`{"error":{"message":"status 503 %s"}}`, long)
		if resp.StatusCode != 503 || string(got) != want || s.count() != 3 {
			t.Fatalf("status %d, %d body bytes (want %d) after %d requests", resp.StatusCode, len(got), len(want), s.count())
		}
		last := events[len(events)-1]
		if last.Type != rebound.EventGiveUp || last.Reason != rebound.StopAttempts || last.Attempt != 3 {
			t.Fatalf("last event %+v", last)
		}
		if !ht.allClosed() {
			t.Fatal("a discarded response body was not closed")
		}
	})
}

func TestTransportDoesNotRetryPermanent(t *testing.T) {
	s := &script{statuses: []int{400}}
	client := &http.Client{Transport: &rebound.Transport{Base: &handlerTransport{h: s}}}
	resp, err := client.Post("http://provider.test/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || s.count() != 1 || !strings.Contains(string(got), "status 400") {
		t.Fatalf("status %d body %q after %d requests", resp.StatusCode, got, s.count())
	}
}

func TestTransportHonoursRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{statuses: []int{429, 200}, header: http.Header{"Retry-After": {"2"}}}
		client := &http.Client{Transport: &rebound.Transport{Base: &handlerTransport{h: s}}}
		start := time.Now()
		resp, err := client.Get("http://provider.test/")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if elapsed := time.Since(start); elapsed != 2*time.Second || resp.StatusCode != 200 {
			t.Fatalf("status %d after %v, want 200 after the server's 2s", resp.StatusCode, elapsed)
		}
	})
}

func TestTransportSideEffects(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want int
	}{{"", 1}, {"tool-call-42", 3}} {
		s := &script{statuses: []int{500}} // not a refusal: the server may have acted
		client := &http.Client{Transport: &rebound.Transport{Base: &handlerTransport{h: s}, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}}
		req, _ := http.NewRequestWithContext(rebound.WithSideEffects(context.Background()), http.MethodPost, "http://tool.test/send", strings.NewReader("hi"))
		if tc.key != "" {
			req.Header.Set("Idempotency-Key", tc.key)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if s.count() != tc.want {
			t.Errorf("Idempotency-Key %q: %d requests, want %d", tc.key, s.count(), tc.want)
		}
	}
}

func TestTransportUnreplayableBodyIsSentOnce(t *testing.T) {
	s := &script{statuses: []int{503, 200}}
	var reason rebound.StopReason
	obs := rebound.ObserverFunc(func(e rebound.Event) {
		if e.Type == rebound.EventGiveUp {
			reason = e.Reason
		}
	})
	tr := &rebound.Transport{Base: &handlerTransport{h: s}, MaxBufferedBody: 16, Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: obs}}
	body := strings.Repeat("b", 40)
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/", io.MultiReader(strings.NewReader(body)))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || s.count() != 1 || s.bodies[0] != body || reason != rebound.StopUnreplayableBody {
		t.Fatalf("status %d, %d requests, body %q, reason %v", resp.StatusCode, s.count(), s.bodies[0], reason)
	}
}

// TestTransportConnectionResets runs over loopback against the chaos
// server's reset mode: the connection drops with no response at all.
func TestTransportConnectionResets(t *testing.T) {
	srv, err := chaos.New(chaos.Config{Mode: chaos.ModeReset})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	client := &http.Client{Transport: &rebound.Transport{Policy: rebound.Policy{BaseDelay: time.Millisecond}}}
	_, err = client.Get(ts.URL)
	var gu *rebound.GiveUpError
	if !errors.As(err, &gu) || gu.Attempts != 3 || gu.Reason != rebound.StopAttempts || gu.Verdict.Kind != rebound.KindTransient {
		t.Fatalf("err %v (%+v)", err, gu)
	}
	if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) {
		t.Fatalf("the transport error is not reachable: %v", err)
	}
	if n := srv.Stats().Requests; n != 3 {
		t.Fatalf("server saw %d requests, want 3", n)
	}
}

// stallingTransport never answers until the attempt's context ends; from
// the third attempt on it answers at once with a body, and records the
// attempt's context so the test can see when it ends.
type stallingTransport struct {
	mu       sync.Mutex // guards attempts and last
	attempts int
	last     context.Context
}

func (s *stallingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.attempts++
	n := s.attempts
	s.last = req.Context()
	s.mu.Unlock()
	if n < 3 {
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("late but whole")), Request: req}, nil
}

func TestTransportAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &stallingTransport{}
		client := &http.Client{Transport: &rebound.Transport{Base: st, Policy: rebound.Policy{AttemptTimeout: time.Second, BaseDelay: rebound.NoDelay}}}
		start := time.Now()
		resp, err := client.Get("http://provider.test/")
		if err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed != 2*time.Second {
			t.Fatalf("took %v, want two 1s attempt timeouts", elapsed)
		}
		// The attempt's context outlives RoundTrip: the body is still to be read.
		time.Sleep(500 * time.Millisecond) // virtual time, inside the bubble
		if st.last.Err() != nil {
			t.Fatal("the attempt's context ended when RoundTrip returned")
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || string(got) != "late but whole" {
			t.Fatalf("body %q, %v", got, err)
		}
		resp.Body.Close()
		if st.last.Err() == nil {
			t.Fatal("the attempt's context outlived its body")
		}
	})
}

func TestTransportCallerCancelsDuringAWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &script{statuses: []int{503}}
		client := &http.Client{Transport: &rebound.Transport{Base: &handlerTransport{h: s}, Policy: rebound.Policy{BaseDelay: 10 * time.Second, Jitter: rebound.JitterNone}}}
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://provider.test/", nil)
		start := time.Now()
		_, err := client.Do(req)
		var gu *rebound.GiveUpError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &gu) || gu.Reason != rebound.StopCanceled || time.Since(start) != time.Second {
			t.Fatalf("err %v after %v", err, time.Since(start))
		}
	})
}

// echoSecrets fails with a body that repeats the request's credentials.
func echoSecrets(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintf(w, `{"error":{"message":"bad auth %q %q %q %q key=%s"}}`, r.Header.Get("Authorization"),
		r.Header.Get("X-Api-Key"), r.Header.Get("Api-Key"), r.Header.Get("X-Goog-Api-Key"), r.URL.Query().Get("key"))
}

func TestTransportNeverLeaksSecrets(t *testing.T) {
	secrets := []string{"sk-proj-SECRETSECRET1", "sk-ant-SECRETSECRET2", "azure-SECRETSECRET3", "AIzaSECRETSECRET4", "AIzaSECRETSECRET5"}
	var seen bytes.Buffer
	obs := rebound.ObserverFunc(func(e rebound.Event) { fmt.Fprintf(&seen, "%+v %v\n", e, e.Err) })
	tr := &rebound.Transport{Base: &handlerTransport{h: http.HandlerFunc(echoSecrets)}, Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: obs}}
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1?key="+secrets[4], strings.NewReader("{}"))
	req.Header.Set("Authorization", "Bearer "+secrets[0])
	req.Header.Set("X-Api-Key", secrets[1])
	req.Header.Set("Api-Key", secrets[2])
	req.Header.Set("X-Goog-Api-Key", secrets[3])
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	given, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, s := range secrets {
		if strings.Contains(seen.String(), s) {
			t.Errorf("secret %s in an event: %s", s, seen.String())
		}
		// The caller's own response is given back untouched.
		if !strings.Contains(string(given), s) {
			t.Errorf("the response body given back was altered: %s", given)
		}
	}
	if !strings.Contains(seen.String(), "[redacted]") {
		t.Errorf("events show no redaction: %s", seen.String())
	}

	// And over a transport error that names the URL, key and all, as some
	// base transports' errors do: scrubbed, yet still reachable.
	seen.Reset()
	dead := &rebound.Transport{
		Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			return nil, &url.Error{Op: "Post", URL: r.URL.String(), Err: syscall.ECONNREFUSED}
		}),
		Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: obs},
	}
	req, _ = http.NewRequest(http.MethodPost, "http://provider.test/v1?key="+secrets[4], strings.NewReader("{}"))
	_, err = dead.RoundTrip(req)
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "key=[redacted]") {
		t.Fatalf("error %v", err)
	}
	if strings.Contains(err.Error(), secrets[4]) || strings.Contains(seen.String(), secrets[4]) {
		t.Errorf("the key leaked:\n%v\n%s", err, seen.String())
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTransportConcurrentUse(t *testing.T) {
	srv, err := chaos.New(chaos.Config{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	// 200 calls at 35% failures make about 107 retries in well under a
	// second: close to the default budget of 120, which is tested elsewhere.
	client := &http.Client{Transport: &rebound.Transport{DisableRetryBudget: true, Policy: rebound.Policy{MaxAttempts: 6, BaseDelay: rebound.NoDelay}}}
	var wg sync.WaitGroup
	var ok atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 25 {
				resp, err := client.Post(ts.URL, "application/json", strings.NewReader(`{"q":1}`))
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// 6 attempts at 35% failures: 1 − 0.35⁶ ≈ 99.8% succeed.
	if ok.Load() < 195 {
		t.Fatalf("%d of 200 calls succeeded", ok.Load())
	}
}

// TestTransportGetBodyFailureStops: a body that cannot be had again ends
// the call with the last response; retrying cannot fix it.
func TestTransportGetBodyFailureStops(t *testing.T) {
	s := &script{statuses: []int{503}}
	var reason rebound.StopReason
	obs := rebound.ObserverFunc(func(e rebound.Event) {
		if e.Type == rebound.EventGiveUp {
			reason = e.Reason
		}
	})
	tr := &rebound.Transport{Base: &handlerTransport{h: s}, Policy: rebound.Policy{MaxAttempts: 5, BaseDelay: rebound.NoDelay, Observer: obs}}
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/", strings.NewReader("{}"))
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("spool file gone") }
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 503 || s.count() != 1 || reason != rebound.StopUnreplayableBody {
		t.Fatalf("status %d, %d requests, reason %v", resp.StatusCode, s.count(), reason)
	}
}

// upgradeTransport answers with 101 and a connection as the body.
type upgradeTransport struct{}

type conn struct{ io.Reader }

func (conn) Write(p []byte) (int, error) { return len(p), nil }
func (conn) Close() error                { return nil }

func (upgradeTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: http.Header{}, Body: conn{strings.NewReader("")}, Request: req}, nil
}

func TestTransportLeavesUpgradesAlone(t *testing.T) {
	tr := &rebound.Transport{Base: upgradeTransport{}, Policy: rebound.Policy{AttemptTimeout: time.Second}}
	req, _ := http.NewRequest(http.MethodGet, "http://provider.test/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := resp.Body.(io.ReadWriteCloser); !ok {
		t.Fatalf("the upgraded connection lost its Write: %T", resp.Body)
	}
}

// TestTransportSharedSeededRand: a seeded *rand.Rand in the Policy of a
// Transport used by many goroutines (run with -race).
func TestTransportSharedSeededRand(t *testing.T) {
	s := &script{statuses: []int{503}}
	tr := &rebound.Transport{Base: &handlerTransport{h: s}, DisableRetryBudget: true, Policy: rebound.Policy{
		MaxAttempts: 4, BaseDelay: time.Microsecond, MaxDelay: 10 * time.Microsecond, Rand: rand.New(rand.NewPCG(1, 1)),
	}}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 10 {
				req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	if s.count() != 8*10*4 {
		t.Fatalf("%d requests, want %d", s.count(), 8*10*4)
	}
}
