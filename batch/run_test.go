package batch_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/batch"
	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/ratelimit"
)

// served hands requests to a handler in memory, so that a run's waits
// pass in virtual time inside a synctest bubble, and notes the custom_id
// of every request it serves (the bodies the tests send carry it).
type served struct {
	h  http.Handler
	mu sync.Mutex // guards ids
	// ids counts the requests served for each custom_id.
	ids map[string]int
}

func (s *served) RoundTrip(req *http.Request) (*http.Response, error) {
	body, _ := io.ReadAll(req.Body)
	req.Body.Close()
	var b struct{ Metadata struct{ ID string } }
	json.Unmarshal(body, &b)
	s.mu.Lock()
	if s.ids == nil {
		s.ids = map[string]int{}
	}
	s.ids[b.Metadata.ID]++
	s.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(body))
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	if err := req.Context().Err(); err != nil { // as a client that went away sees it
		return nil, err
	}
	return rec.Result(), nil
}

// take returns the counts so far and starts new ones.
func (s *served) take() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := s.ids
	s.ids = nil
	return ids
}

// input returns a batch of n chat requests, "req-0", "req-1", ..., each
// naming its own custom_id in its metadata.
func input(t *testing.T, n int) *batch.File {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"custom_id":"req-%d","method":"POST","url":"/v1/chat/completions","body":{"model":"m","messages":[{"role":"user","content":"hi"}],"metadata":{"id":"req-%d"}}}`+"\n", i, i)
	}
	f, err := batch.Read(strings.NewReader(b.String()))
	if err != nil || len(f.Malformed) > 0 {
		t.Fatalf("input: %v %v", err, f.Malformed)
	}
	return f
}

// quick is a policy whose waits are short, so a bubble's clock need not
// run far; attempts caps them.
func quick(attempts int) rebound.Policy {
	return rebound.Policy{MaxAttempts: attempts, BaseDelay: 10 * time.Millisecond, MaxDelay: 100 * time.Millisecond}
}

func run(t *testing.T, r *batch.Runner, f *batch.File, m *memoryStore) batch.Summary {
	t.Helper()
	j, _ := m.open()
	defer j.Close()
	s, err := r.Run(t.Context(), f, j)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return s
}

// TestTheArticlesScene is the 429 article's scene: 200 calls to a server
// that fails 35% of them. Without retries about 130 succeed; the rerun
// sends only the failed ones, and retries them; with four attempts the
// first run alone answers at least 194.
func TestTheArticlesScene(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := chaos.New(chaos.Config{Seed: 1})
		up := &served{h: srv}
		f := input(t, 200)
		m := &memoryStore{}

		first := run(t, &batch.Runner{BaseURL: "http://chaos", Base: up, Policy: quick(1)}, f, m)
		sent := up.take()
		if first.Succeeded < 115 || first.Succeeded > 145 || first.Succeeded+first.Failed != 200 {
			t.Fatalf("without retries %d of 200 succeeded and %d failed; the article had 122 (61%%), 35%% failing gives about 130", first.Succeeded, first.Failed)
		}
		if srv.Stats().Requests != 200 || len(sent) != 200 {
			t.Fatalf("the first run made %d requests for %d ids, want 200 for 200", srv.Stats().Requests, len(sent))
		}
		failedIDs := map[string]bool{}
		j, _ := m.open()
		batch.WriteOutput(t.Context(), j, io.Discard, io.Discard)
		j.Outcomes(t.Context(), func(o batch.Outcome) error {
			if o.State != batch.Succeeded {
				failedIDs[o.ID] = true
			}
			return nil
		})
		j.Close()

		before := srv.Stats().Requests
		second := run(t, &batch.Runner{BaseURL: "http://chaos", Base: up, Policy: quick(4)}, f, m)
		resent := up.take()
		if second.Sent != len(failedIDs) || len(resent) != len(failedIDs) {
			t.Errorf("the rerun sent %d ids (%d to the server), want the %d that failed", second.Sent, len(resent), len(failedIDs))
		}
		for id := range resent {
			if !failedIDs[id] {
				t.Errorf("the rerun sent %s, which had succeeded", id)
			}
		}
		if got := srv.Stats().Requests - before; got != second.Attempts || got <= len(failedIDs) {
			t.Errorf("the rerun's requests: the server counted %d, the run %d, for %d ids; want retries among them", got, second.Attempts, len(failedIDs))
		}
		t.Logf("first run: %d/200 succeeded; rerun: %d ids in %d requests, %d succeeded", first.Succeeded, second.Sent, second.Attempts, second.Succeeded)

		srv.Reset()
		up.take()
		retried := run(t, &batch.Runner{BaseURL: "http://chaos", Base: up, Policy: quick(4)}, f, &memoryStore{})
		if retried.Succeeded < 194 {
			t.Errorf("with 4 attempts %d of 200 succeeded, want at least 194", retried.Succeeded)
		}
		t.Logf("with 4 attempts: %d/200 succeeded in %d requests, %d retries", retried.Succeeded, retried.Attempts, retried.Retries)
	})
}

// TestAStoppedRunGivesItsItemsBack stops a run midway: the items in
// flight go back unanswered, not failed, and the next run sends exactly
// what had no answer.
func TestAStoppedRunGivesItsItemsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var mu sync.Mutex // guards answered and hang
		answered, hang := 0, true
		up := &served{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			stall := hang && answered >= 40
			if !stall {
				answered++
			}
			mu.Unlock()
			if stall {
				cancel() // the run is stopped with this request in flight
				<-r.Context().Done()
				return
			}
			w.Write([]byte(`{"ok":true}`))
		})}
		f := input(t, 100)
		m := &memoryStore{}
		r := &batch.Runner{BaseURL: "http://up", Base: up, Concurrency: 8, Policy: quick(3)}
		j, _ := m.open()
		s, err := r.Run(ctx, f, j)
		j.Close()
		if err != context.Canceled || !s.Interrupted || s.Succeeded > 40 || s.Succeeded == 0 || s.Failed+s.FailedPermanent != 0 {
			t.Fatalf("stopped run: %v, %+v; want context.Canceled, interrupted, up to 40 succeeded, none failed", err, s)
		}
		first := up.take()

		mu.Lock()
		hang = false
		mu.Unlock()
		next := run(t, &batch.Runner{BaseURL: "http://up", Base: up, Policy: quick(3)}, f, m)
		second := up.take()
		want := 100 - s.Succeeded
		unanswered := len(first) - s.Succeeded // reached the server, no answer kept
		if next.Succeeded != want || next.Resent != unanswered || len(second) != want {
			t.Errorf("the next run: %+v, %d ids sent; want the %d unanswered sent once, %d of them resent", next, len(second), want, unanswered)
		}
		for id := range second {
			if second[id] != 1 {
				t.Errorf("%s sent %d times", id, second[id])
			}
		}
		if len(first) < s.Succeeded+1 {
			t.Errorf("the stopped run sent %d ids and %d succeeded: none was in flight", len(first), s.Succeeded)
		}
		var out bytes.Buffer
		j, _ = m.open()
		w, err := batch.WriteOutput(t.Context(), j, &out, io.Discard)
		if err != nil || w.Succeeded != 100 || strings.Count(out.String(), "\n") != 100 {
			t.Errorf("output: %+v %v, %d lines; want every custom_id once", w, err, strings.Count(out.String(), "\n"))
		}
	})
}

// TestPermanentFailuresStayFailed: a 400 is not sent again by the next run
// unless it asks (RetryFailed); a 503 is.
func TestPermanentFailuresStayFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fixed := false
		up := &served{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			switch {
			case fixed:
				w.Write([]byte(`{"ok":true}`))
			case bytes.Contains(body, []byte(`"req-1"`)):
				w.WriteHeader(400)
				w.Write([]byte(`{"error":{"message":"bad","type":"invalid_request_error"}}`))
			case bytes.Contains(body, []byte(`"req-2"`)):
				w.WriteHeader(503)
			default:
				w.Write([]byte(`{"ok":true}`))
			}
		})}
		f := input(t, 3)
		m := &memoryStore{}
		first := run(t, &batch.Runner{BaseURL: "http://up", Base: up, Policy: quick(2)}, f, m)
		if first.Succeeded != 1 || first.Failed != 1 || first.FailedPermanent != 1 || first.Attempts != 1+1+2 {
			t.Fatalf("first run: %+v; want 1 succeeded, 1 failed after 2 attempts, 1 failed permanently after 1", first)
		}
		up.take()
		fixed = true
		second := run(t, &batch.Runner{BaseURL: "http://up", Base: up}, f, m)
		if got := up.take(); second.Sent != 1 || got["req-2"] != 1 || got["req-1"] != 0 {
			t.Errorf("the second run sent %v; want req-2 alone", got)
		}
		third := run(t, &batch.Runner{BaseURL: "http://up", Base: up, Options: batch.Options{RetryFailed: true}}, f, m)
		if got := up.take(); third.Sent != 1 || got["req-1"] != 1 {
			t.Errorf("with RetryFailed the run sent %v; want req-1 alone", got)
		}
	})
}

// unreachable is a Base whose every dial fails with err, as net/http's
// own transport sees a host that does not resolve or does not answer; no
// name is looked up and no connection made.
func unreachable(err error) *http.Transport {
	return &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, err }}
}

// TestAHostThatCannotBeReachedIsCured: a request whose host does not
// resolve (what net.Dialer returns when the name is not found, which the
// verdict for one call holds permanent) or refuses the connection fails
// after the run's ordinary attempts, recorded as Failed, and the next run,
// which reaches the host, sends it again.
func TestAHostThatCannotBeReachedIsCured(t *testing.T) {
	notFound := &net.DNSError{Err: "no such host", Name: "api.openai.com", IsNotFound: true}
	for _, c := range []struct {
		name     string
		err      error
		attempts int // of each request: the call's verdict is kept
	}{
		{"no such host", &net.OpError{Op: "dial", Net: "tcp", Err: notFound}, 1},
		{"no such host, unwrapped", notFound, 1},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, m := input(t, 4), &memoryStore{}
				base := unreachable(c.err)
				defer base.CloseIdleConnections()
				first := run(t, &batch.Runner{BaseURL: "https://api.openai.com", Base: base, Policy: quick(3)}, f, m)
				if first.Failed != 4 || first.FailedPermanent != 0 || first.Attempts != 4*c.attempts {
					t.Fatalf("first run: %+v; want 4 failed after %d attempts each, none permanently", first, c.attempts)
				}
				if o := m.recorded[0]; o.State != batch.Failed || o.ErrorCode != "transient" || !strings.Contains(o.ErrorMessage, c.err.Error()) {
					t.Errorf("recorded %+v; want failed, transient, with the dial's error", o)
				}
				up := &served{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })}
				second := run(t, &batch.Runner{BaseURL: "https://api.openai.com", Base: up}, f, m)
				if got := up.take(); second.Succeeded != 4 || len(got) != 4 {
					t.Errorf("the next run: %+v, sent %v; want all 4 sent and answered", second, got)
				}
			})
		})
	}
}

// TestFailuresKeepNoSecret: a server that echoes the key in its error body
// does not get it into the journal or the errors file.
func TestFailuresKeepNoSecret(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &served{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(401)
			fmt.Fprintf(w, `{"error":{"message":"Incorrect API key provided: %s"}}`, r.Header.Get("Authorization"))
		})}
		// A key of a provider's shape, and one of no known shape (a local
		// server's token): both are the request's, so neither is kept.
		for _, key := range []string{"sk-proj-abcdefghijklmnopqrstuvwxyz0123456789", "local-token-42"} {
			m := &memoryStore{}
			run(t, &batch.Runner{BaseURL: "http://up", Base: up, Header: http.Header{"Authorization": {"Bearer " + key}}}, input(t, 1), m)
			var errs bytes.Buffer
			j, _ := m.open()
			batch.WriteOutput(t.Context(), j, io.Discard, &errs)
			if strings.Contains(errs.String(), key) || strings.Contains(errs.String(), key[:12]) || !strings.Contains(errs.String(), `"status_code":401`) {
				t.Errorf("errors file: %s", errs.String())
			}
		}
	})
}

// TestRedirectsAreNotFollowed: an API call is never redirected, and a
// redirect to another host would carry the key there.
func TestRedirectsAreNotFollowed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		up := &served{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://elsewhere/steal", http.StatusTemporaryRedirect)
		})}
		m := &memoryStore{}
		s := run(t, &batch.Runner{BaseURL: "http://up", Base: up}, input(t, 1), m)
		if s.FailedPermanent != 1 || s.Attempts != 1 || m.recorded[0].StatusCode != 307 {
			t.Errorf("a redirect: %+v, %+v; want one attempt, failed permanently with 307", s, m.recorded)
		}
	})
}

// TestJoinURL: a base URL with or without the version segment.
func TestJoinURL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var paths []string
		up := &served{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			paths = append(paths, r.URL.String())
		})}
		for _, base := range []string{"http://h", "http://h/", "http://h/v1", "http://h/v1/", "http://h/openai/v1", "http://h/api"} {
			run(t, &batch.Runner{BaseURL: base, Base: up}, input(t, 1), &memoryStore{})
		}
		want := []string{"http://h/v1/chat/completions", "http://h/v1/chat/completions", "http://h/v1/chat/completions", "http://h/v1/chat/completions",
			"http://h/openai/v1/chat/completions", "http://h/api/v1/chat/completions"}
		if fmt.Sprint(paths) != fmt.Sprint(want) {
			t.Errorf("sent to %q,\nwant %q", paths, want)
		}
	})
}

// endless answers 200 and a body that sends a byte now and then and never
// ends, until the request's context is done.
type endless struct{}

func (endless) RoundTrip(req *http.Request) (*http.Response, error) {
	pr, pw := io.Pipe()
	go func() {
		for {
			select {
			case <-req.Context().Done():
				pw.CloseWithError(req.Context().Err())
				return
			case <-time.After(time.Second):
				pw.Write([]byte(" "))
			}
		}
	}()
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: pr, Request: req}, nil
}

// TestAnEndlessAnswerDoesNotHoldTheRun: a success whose body never ends is
// cut at the attempt timeout (DefaultAttemptTimeout unless the policy sets
// one), and the item fails, to be sent again by the next run.
func TestAnEndlessAnswerDoesNotHoldTheRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := &memoryStore{}
		start := time.Now()
		s := run(t, &batch.Runner{BaseURL: "http://up", Base: endless{}, Policy: rebound.Policy{MaxAttempts: 1}}, input(t, 2), m)
		if took := time.Since(start); s.Failed != 2 || took != batch.DefaultAttemptTimeout {
			t.Errorf("endless bodies: %+v after %v; want both failed after %v", s, took, batch.DefaultAttemptTimeout)
		}
		if o := m.recorded[0]; o.State != batch.Failed || o.ErrorCode != "transient" {
			t.Errorf("recorded %+v", o)
		}
	})
}

// TestRunOverLoopback runs a batch against a real server, with the
// Runner's own connections: they are closed when the run ends.
func TestRunOverLoopback(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("x-request-id", "req_"+r.URL.Path)
		w.Write([]byte(`{"ok":true}`))
	}))
	defer hs.Close()
	m := &memoryStore{}
	s := run(t, &batch.Runner{BaseURL: hs.URL, Concurrency: 4}, input(t, 20), m)
	if s.Succeeded != 20 || m.recorded[0].RequestID != "req_/v1/chat/completions" {
		t.Errorf("%+v, %+v", s, m.recorded[0])
	}
}

// TestRequestsYieldToInteractiveCalls shares an Adaptive limit of one slot
// between a run and an interactive caller: the run's requests wait as
// ratelimit.Batch, so the interactive call that came after them is
// granted the slot first, and the run then ends.
func TestRequestsYieldToInteractiveCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shared := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 1, Max: 1})
		shared.TryAcquire() // an interactive call in flight
		up := &served{h: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "{}") })}
		var mu sync.Mutex
		var priorities []ratelimit.Priority
		base := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			priorities = append(priorities, ratelimit.PriorityFrom(req.Context()))
			mu.Unlock()
			return up.RoundTrip(req)
		})
		m := &memoryStore{}
		f := input(t, 3)
		j, _ := m.open()
		defer j.Close()
		var s batch.Summary
		var err error
		done := make(chan struct{})
		go func() { // t.Fatal belongs to the test's goroutine: the error is checked there
			defer close(done)
			s, err = (&batch.Runner{BaseURL: "http://up", Base: base, Adaptive: shared, Concurrency: 3}).Run(t.Context(), f, j)
		}()
		synctest.Wait() // the run's requests wait for the slot
		interactive := make(chan error)
		go func() { interactive <- shared.Acquire(t.Context()) }()
		synctest.Wait()
		shared.Release(ratelimit.Neutral)
		if err := <-interactive; err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if n := len(up.take()); n != 0 {
			t.Fatalf("%d batch requests sent before the interactive call that came after them", n)
		}
		shared.Release(ratelimit.Neutral)
		<-done
		if err != nil {
			t.Fatal(err)
		}
		if s.Succeeded != 3 || len(priorities) != 3 {
			t.Fatalf("%+v, %d requests", s, len(priorities))
		}
		for _, p := range priorities {
			if p != ratelimit.Batch {
				t.Errorf("a request went as %v", p)
			}
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
