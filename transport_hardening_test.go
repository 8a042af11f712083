package rebound_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/observe"
)

// scripted answers every request with the next scripted event stream.
type scripted struct {
	streams []string
	calls   atomic.Int32
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	n := int(s.calls.Add(1))
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(strings.NewReader(s.streams[min(n, len(s.streams))-1])), Request: req}, nil
}

const (
	roleChunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"
	textChunk = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"}}]}\n\ndata: [DONE]\n\n"
)

// recorder keeps every event's text and error, for secrets tests.
type recorder struct {
	text   bytes.Buffer
	errors []error
}

func (r *recorder) Observe(e rebound.Event) {
	fmt.Fprintf(&r.text, "%+v %v\n", e, e.Err)
	if e.Err != nil {
		r.errors = append(r.errors, e.Err)
		var he *rebound.HTTPError
		if errors.As(e.Err, &he) {
			fmt.Fprintf(&r.text, "header %v body %s\n", he.Header, he.Body)
		}
		var se *rebound.StreamError
		if errors.As(e.Err, &se) {
			fmt.Fprintf(&r.text, "stream data %s\n", se.Data)
		}
	}
}

// leaks says which of secrets, or of their first eight characters, text
// holds.
func leaks(text string, secrets ...string) []string {
	var found []string
	for _, s := range secrets {
		if strings.Contains(text, s[:8]) {
			found = append(found, s)
		}
	}
	return found
}

// A 200 event stream whose in-band error event echoes the API key: the key
// reached the *StreamError, the slog records and every give-up error.
func TestSecretsNeverLeaveAnInStreamError(t *testing.T) {
	key := "sk-proj-STREAMSECRET0123456789"
	st := &scripted{streams: []string{"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"overloaded for key " + key + "\"}}\n\n"}}
	var rec recorder
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tr := &rebound.Transport{Base: st, Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: observe.Multi(&rec, observe.Slog(logger))}}
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader("{}"))
	req.Header.Set("X-Api-Key", key)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	given, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(given), key) {
		t.Errorf("the stream given back was altered: %s", given)
	}
	if len(rec.errors) == 0 {
		t.Fatal("no failed attempt was seen")
	}
	if l := leaks(rec.text.String()+logs.String(), key); l != nil {
		t.Errorf("the key leaked:\n%s\n%s", rec.text.String(), logs.String())
	}
	var se *rebound.StreamError
	if !errors.As(rec.errors[0], &se) || !bytes.Contains(se.Data, []byte("[redacted]")) {
		t.Errorf("stream error %v", rec.errors[0])
	}
}

// A key that straddles the cut at MaxErrorBody loses its first characters
// too.
func TestSecretsStraddlingTheErrorBodyCut(t *testing.T) {
	key := "azure-STRADDLE-0123456789abcdef"
	for _, overlap := range []int{4, 8, 12, len(key) - 1} {
		pad := strings.Repeat("x", rebound.MaxErrorBody-overlap)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, pad+r.Header.Get("Api-Key")+" and more")
		})
		var rec recorder
		tr := &rebound.Transport{Base: &handlerTransport{h: h}, Policy: rebound.Policy{MaxAttempts: 1, Observer: &rec}}
		req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
		req.Header.Set("Api-Key", key)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		var he *rebound.HTTPError
		if len(rec.errors) == 0 || !errors.As(rec.errors[0], &he) {
			t.Fatalf("events %s", rec.text.String())
		}
		if len(he.Body) > rebound.MaxErrorBody {
			t.Errorf("body of %d bytes", len(he.Body))
		}
		tail := string(he.Body[len(he.Body)-min(64, len(he.Body)):])
		if strings.Contains(tail, key[:4]) {
			t.Errorf("overlap %d: the body ends with the key's start: %q", overlap, tail)
		}
	}
}

// Credential headers a server echoes do not stay in HTTPError.Header, and
// a "key" query parameter with + / = in it is scrubbed in its encoded form.
func TestSecretsEchoedInHeadersAndEncoded(t *testing.T) {
	key := "AIzaSy+Odd/Key=0123456789abcdefghij"
	token := "sk-ant-api03-HEADERSECRET0123456789"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Api-Key", r.Header.Get("X-Api-Key"))
		w.Header().Set("X-Debug-Request", "query="+r.URL.RawQuery+" auth="+r.Header.Get("X-Api-Key"))
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, `{"error":{"message":"bad query %s / %s"}}`, r.URL.RawQuery, r.URL.EscapedPath())
	})
	var rec recorder
	tr := &rebound.Transport{Base: &handlerTransport{h: h}, Policy: rebound.Policy{MaxAttempts: 2, BaseDelay: rebound.NoDelay, Observer: &rec}}
	req, _ := http.NewRequest(http.MethodGet, "http://provider.test/v1/models/"+url.PathEscape(key)+"?key="+url.QueryEscape(key), nil)
	req.Header.Set("X-Api-Key", token)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("X-Api-Key") != token {
		t.Error("the response's own header was changed")
	}
	text := rec.text.String()
	for _, form := range []string{key, url.QueryEscape(key), url.PathEscape(key), token} {
		if strings.Contains(text, form) {
			t.Errorf("%q leaked:\n%s", form, text)
		}
	}
}

// NewHTTPError, used in a function given to Do, knows the request from the
// response and scrubs its credentials; an error built by hand still has
// key-shaped words scrubbed from its message.
func TestNewHTTPErrorScrubs(t *testing.T) {
	token := "tok-NEWHTTPERROR-0123456789"
	req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp := &http.Response{StatusCode: 401, Header: http.Header{"Www-Authenticate": {"Bearer " + token}},
		Body: io.NopCloser(strings.NewReader(`{"error":{"message":"token ` + token + ` revoked"}}`)), Request: req}
	he := rebound.NewHTTPError(resp)
	if text := fmt.Sprintf("%v %s %v", he, he.Body, he.Header); strings.Contains(text, token) {
		t.Errorf("leaked: %s", text)
	}
	byHand := &rebound.HTTPError{StatusCode: 401, Body: []byte(`{"error":"invalid key sk-proj-BYHAND0123456789abcdef"}`)}
	if strings.Contains(byHand.Error(), "BYHAND") {
		t.Errorf("leaked: %v", byHand)
	}
}

// neverEndingBody is an error body that sends its first bytes and then
// nothing, until it is closed, in a synctest bubble.
type neverEndingBody struct {
	first  io.Reader
	closed chan struct{}
	once   atomic.Bool
}

func newNeverEndingBody(first string) *neverEndingBody {
	return &neverEndingBody{first: strings.NewReader(first), closed: make(chan struct{})}
}

func (b *neverEndingBody) Read(p []byte) (int, error) {
	if n, _ := b.first.Read(p); n > 0 {
		return n, nil
	}
	<-b.closed
	return 0, errors.New("read on closed body")
}

func (b *neverEndingBody) Close() error {
	if b.once.CompareAndSwap(false, true) {
		close(b.closed)
	}
	return nil
}

// A 503 whose body never completes no longer holds RoundTrip when neither
// the caller nor AttemptTimeout set a deadline: each attempt reads its
// error body for at most 5 s, and the response given back is readable.
func TestTransportBoundsTheErrorBodyRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			return &http.Response{StatusCode: 503, Header: http.Header{"Content-Length": {"1000"}}, ContentLength: 1000,
				Body: newNeverEndingBody(`{"error":`), Request: r}, nil
		})
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}
		req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed != 15*time.Second || calls != 3 {
			t.Fatalf("%d calls in %v, want 3 in 15s", calls, elapsed)
		}
		got, err := io.ReadAll(resp.Body)
		if err != nil || string(got) != `{"error":` {
			t.Fatalf("body %q, %v", got, err)
		}
		resp.Body.Close()
	})
}

// The same over loopback, against a server that promises 1000 bytes, sends
// 9 and holds the connection: http.DefaultTransport hands the response back
// at once, and so does rebound, once its bound on the body is over.
func TestTransportErrorBodyThatNeverCompletesOverLoopback(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":`)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	tr := &rebound.Transport{ErrorBodyTimeout: 50 * time.Millisecond, Policy: rebound.Policy{MaxAttempts: 2, BaseDelay: rebound.NoDelay}}
	defer tr.CloseIdleConnections()
	start := time.Now()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if elapsed := time.Since(start); resp.StatusCode != 503 || err != nil || string(got) != `{"error":` || elapsed > 5*time.Second {
		t.Fatalf("status %d, body %q, %v, after %v", resp.StatusCode, got, err, elapsed)
	}
}

// The body of a failed response given back after AttemptTimeout ended the
// last attempt mid-body is readable: what came, then its end.
func TestTransportGivesBackAReadableBodyAfterAttemptTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":{"message":"slow`)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	tr := &rebound.Transport{Policy: rebound.Policy{MaxAttempts: 2, BaseDelay: rebound.NoDelay, AttemptTimeout: 50 * time.Millisecond}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || err != nil || string(got) != `{"error":{"message":"slow` {
		t.Fatalf("status %d, body %q, %v", resp.StatusCode, got, err)
	}
}

// A request that sets Accept-Encoding itself gets its error bodies
// compressed: they are decoded before they are judged, so an exhausted
// quota is not read as a rate limit and sent three times.
func TestTransportDecodesCompressedErrorBodies(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		zw := gzip.NewWriter(w)
		io.WriteString(zw, `{"error":{"message":"You exceeded your current quota.","type":"insufficient_quota","code":"insufficient_quota"}}`)
		zw.Close()
	}))
	defer srv.Close()
	var rec recorder
	tr := &rebound.Transport{Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: &rec}}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		t.Fatalf("the body given back is not the gzip that came: %v", err)
	}
	body, _ := io.ReadAll(zr)
	resp.Body.Close()
	var he *rebound.HTTPError
	if n := calls.Load(); n != 1 || !strings.Contains(string(body), "insufficient_quota") || len(rec.errors) == 0 || !errors.As(rec.errors[0], &he) ||
		rebound.ClassifyResponse(he.StatusCode, he.Header, he.Body).Kind != rebound.KindQuotaExhausted {
		t.Fatalf("%d requests; body %q; events %s", n, body, rec.text.String())
	}
}

// A gzip bomb in an error body is decoded no further than MaxErrorBody.
func TestTransportDecodesNoMoreThanMaxErrorBody(t *testing.T) {
	var member bytes.Buffer
	zw := gzip.NewWriter(&member)
	zw.Write(bytes.Repeat([]byte{' '}, 1<<20))
	zw.Close()
	bomb := bytes.NewBuffer(bytes.Repeat(member.Bytes(), 64)) // 64 MiB of spaces, in 64 gzip members of about 1 KiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Encoding", "gzip")
		w.WriteHeader(http.StatusBadRequest)
		w.Write(bomb.Bytes())
	})
	var rec recorder
	tr := &rebound.Transport{Base: &handlerTransport{h: h}, Policy: rebound.Policy{Observer: &rec}}
	req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var he *rebound.HTTPError
	if !errors.As(rec.errors[0], &he) || len(he.Body) > rebound.MaxErrorBody {
		t.Fatalf("error %v", rec.errors)
	}
}

// An event stream with bare CR line endings, which the SSE specification
// allows, is read as events: its content is found, and it is sent once.
func TestTransportReadsStreamsWithBareCR(t *testing.T) {
	cr := strings.ReplaceAll(roleChunk+textChunk, "\n", "\r")
	st := &scripted{streams: []string{cr}}
	tr := &rebound.Transport{Base: st, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}
	req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/chat/completions", strings.NewReader("{}"))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if st.calls.Load() != 1 || string(got) != cr {
		t.Fatalf("%d calls, body %q", st.calls.Load(), got)
	}
	// And an in-band error with CRLF and bare CR mixed is still an error.
	mixed := "event: error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\r\r"
	st = &scripted{streams: []string{mixed, cr}}
	tr = &rebound.Transport{Base: st, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}
	req, _ = http.NewRequest(http.MethodPost, "http://provider.test/v1/messages", strings.NewReader("{}"))
	if resp, err = tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if st.calls.Load() != 2 || string(got) != cr {
		t.Fatalf("%d calls, body %q", st.calls.Load(), got)
	}
}

// A base transport that panics on a half-open breaker's probe: the breaker
// is told the probe failed, so a call after the next cooldown may probe
// again instead of being refused for ever.
func TestTransportPanicEndsTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := breaker.New("p", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Second})
		var mode atomic.Int32 // 0: 503, 1: panic, 2: 200
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch mode.Load() {
			case 0:
				return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
			case 1:
				panic("base transport bug")
			}
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
		})
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{MaxAttempts: 1, Breaker: b}}
		call := func() (status int, err error, recovered any) {
			defer func() { recovered = recover() }()
			req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
			resp, err := tr.RoundTrip(req)
			if resp != nil {
				resp.Body.Close()
				status = resp.StatusCode
			}
			return status, err, nil
		}
		if status, _, _ := call(); status != 503 || b.State() != breaker.Open {
			t.Fatalf("status %d, breaker %v", status, b.State())
		}
		time.Sleep(time.Second)
		mode.Store(1)
		if _, _, v := call(); v != "base transport bug" { // the half-open probe panics
			t.Fatalf("recovered %v", v)
		}
		mode.Store(2)
		time.Sleep(time.Second)
		status, err, v := call()
		if err != nil || v != nil || status != 200 {
			t.Fatalf("after the cooldown: %d, %v, panic %v (breaker %v)", status, err, v, b.State())
		}
	})
}

// A Transport that meets many hosts keeps a bounded number of retry
// budgets: 6 000 hosts used to retain about 2 MB.
func TestTransportHostBudgetsAreBounded(t *testing.T) {
	ok := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	tr := &rebound.Transport{Base: ok}
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range 6_000 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://host-%d.test/", i), nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	after := heap()
	runtime.KeepAlive(tr)
	if grown := int64(after) - int64(before); grown > 1<<20 {
		t.Errorf("the heap grew by %d bytes over 6 000 hosts", grown)
	}
}

// A failed response whose body has not ended (an error body longer than
// MaxErrorBody, an event stream after its error event) is closed before
// the retry, not drained: the server may hold it open for ever.
func TestTransportNeverDrainsABodyThatWillNotEnd(t *testing.T) {
	for _, c := range []struct {
		name, contentType, first string
	}{
		{"error body of 64 KiB and more, then held", "application/json", strings.Repeat("x", rebound.MaxErrorBody+10)},
		{"in-band error, then held", "text/event-stream", "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var calls int
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					calls++
					status := 503
					if c.contentType == "text/event-stream" {
						status = 200
					}
					return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {c.contentType}},
						Body: newNeverEndingBody(c.first), Request: r}, nil
				})
				tr := &rebound.Transport{Base: base, Policy: rebound.Policy{MaxAttempts: 2, BaseDelay: rebound.NoDelay}}
				req, _ := http.NewRequest(http.MethodPost, "http://provider.test/", strings.NewReader("{}"))
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if calls != 2 {
					t.Fatalf("%d attempts, want 2", calls)
				}
			})
		})
	}
}

// The policy's own classifier or observer panics during a half-open
// breaker's probe through Transport: the probe still ends, as a failure.
func TestTransportPanicInPolicyCodeEndsTheProbe(t *testing.T) {
	for _, where := range []string{"classifier", "observer"} {
		t.Run(where, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				b := breaker.New("p", breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Second})
				p, _ := b.Allow()
				b.Done(p, rebound.OutcomeFailure) // open
				time.Sleep(time.Second)           // the next call is the probe
				base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
					return &http.Response{StatusCode: 503, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
				})
				pol := rebound.Policy{Breaker: b, BaseDelay: rebound.NoDelay}
				if where == "classifier" {
					pol.Classifier = func(error) rebound.Verdict { panic("classifier bug") }
				} else {
					pol.Observer = rebound.ObserverFunc(func(rebound.Event) { panic("observer bug") })
				}
				tr := &rebound.Transport{Base: base, Policy: pol}
				func() {
					defer func() { recover() }() // as net/http's server does for a handler
					req, _ := http.NewRequest(http.MethodGet, "http://provider.test/", nil)
					tr.RoundTrip(req)
				}()
				time.Sleep(time.Second)
				if _, err := b.Allow(); err != nil {
					t.Fatalf("after the panicking probe and a cooldown: %v", err)
				}
			})
		})
	}
}

// NewHTTPError, in a function given to Do with no deadline, reads a body
// that never completes for at most 5 s.
func TestNewHTTPErrorBoundsItsRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		resp := &http.Response{StatusCode: 503, Header: http.Header{}, ContentLength: 1000, Body: newNeverEndingBody(`{"error":`)}
		start := time.Now()
		he := rebound.NewHTTPError(resp)
		if took := time.Since(start); took != 5*time.Second || string(he.Body) != `{"error":` {
			t.Fatalf("after %v: %q", took, he.Body)
		}
	})
}

// timedBody sends its pieces, each after its delay (virtual time in a
// synctest bubble), until closed.
type timedBody struct {
	pieces []string
	delays []time.Duration
	closed chan struct{}
	once   atomic.Bool
}

func newTimedBody(pieces []string, delays []time.Duration) *timedBody {
	return &timedBody{pieces: pieces, delays: delays, closed: make(chan struct{})}
}

func (b *timedBody) Read(p []byte) (int, error) {
	if len(b.pieces) == 0 {
		return 0, io.EOF
	}
	select {
	case <-time.After(b.delays[0]):
	case <-b.closed:
		return 0, errors.New("read on closed body")
	}
	b.delays[0] = 0
	n := copy(p, b.pieces[0])
	if b.pieces[0] = b.pieces[0][n:]; b.pieces[0] == "" {
		b.pieces, b.delays = b.pieces[1:], b.delays[1:]
	}
	return n, nil
}

func (b *timedBody) Close() error {
	if b.once.CompareAndSwap(false, true) {
		close(b.closed)
	}
	return nil
}

// A reasoning model's stream: its preamble at once, then three minutes of
// keep-alives, then the answer. It is slow, not silent: sent once, handed
// over whole. A stream silent for StreamLookahead is still retried.
func TestTransportWaitsForAStreamThatKeepsSending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls int
		keepAlives := 12
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			pieces := []string{"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n"}
			delays := []time.Duration{0}
			for range keepAlives {
				pieces, delays = append(pieces, ": keep-alive\n\n"), append(delays, 15*time.Second)
			}
			pieces = append(pieces, "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"42\"}\n\n")
			delays = append(delays, time.Second)
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: newTimedBody(pieces, delays), Request: r}, nil
		})
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/responses", strings.NewReader("{}"))
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if calls != 1 || !strings.Contains(string(got), `"42"`) || time.Since(start) != 181*time.Second {
			t.Fatalf("%d requests in %v; body %q", calls, time.Since(start), got)
		}

		// Silent for longer than StreamLookahead: stalled, retried.
		calls, keepAlives = 0, 0
		tr = &rebound.Transport{Base: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
				Body: newTimedBody([]string{": hello\n\n", "data: {\"delta\":\"late\"}\n\n"}, []time.Duration{0, 3 * time.Minute}), Request: r}, nil
		}), Policy: rebound.Policy{MaxAttempts: 2, BaseDelay: rebound.NoDelay}}
		req, _ = http.NewRequest(http.MethodPost, "http://provider.test/v1/responses", strings.NewReader("{}"))
		start = time.Now()
		_, err = tr.RoundTrip(req)
		if !errors.Is(err, rebound.ErrStreamStalled) || calls != 2 || time.Since(start) != 4*time.Minute {
			t.Fatalf("%d requests in %v: %v", calls, time.Since(start), err)
		}
	})
}

// An event stream encoded because the request set Accept-Encoding itself
// is decoded to be looked into and handed over as it came: a healthy one
// is sent once, an in-band error before content is retried.
func TestTransportLooksIntoCompressedStreams(t *testing.T) {
	gz := func(events ...string) []string {
		var b bytes.Buffer
		zw := gzip.NewWriter(&b)
		var pieces []string
		for _, e := range events { // one flushed piece an event, as a streaming server sends them
			io.WriteString(zw, e)
			zw.Flush()
			pieces = append(pieces, b.String())
			b.Reset()
		}
		zw.Close()
		return append(pieces, b.String())
	}
	healthy := gz(roleChunk, textChunk)
	failing := gz("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n")
	synctest.Test(t, func(t *testing.T) {
		var calls int
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			calls++
			pieces := healthy
			if calls == 1 {
				pieces = failing
			}
			delays := make([]time.Duration, len(pieces))
			for i := range delays {
				delays[i] = time.Second // a piece a second
			}
			return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}, "Content-Encoding": {"gzip"}},
				Body: newTimedBody(slices.Clone(pieces), delays), Request: r}, nil
		})
		tr := &rebound.Transport{Base: base, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}
		req, _ := http.NewRequest(http.MethodPost, "http://provider.test/v1/chat/completions", strings.NewReader("{}"))
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("the stream was not handed over as it came: %v", err)
		}
		text, _ := io.ReadAll(zr)
		if calls != 2 || string(text) != roleChunk+textChunk {
			t.Fatalf("%d requests; stream %q", calls, text)
		}
	})
}
