package rebound_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/chaos"
)

// closedAddr returns a loopback address nothing listens on: a dial to it
// is refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// dropServer is a loopback server that reads each request's body whole and
// then closes the connection without answering: the request may have been
// carried out, and the client cannot know.
func dropServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		hits.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// giveUp returns the *GiveUpError of a RoundTrip that had no response.
func giveUp(t *testing.T, resp *http.Response, err error) *rebound.GiveUpError {
	t.Helper()
	if resp != nil {
		resp.Body.Close()
		t.Fatalf("status %d, want no response", resp.StatusCode)
	}
	var g *rebound.GiveUpError
	if !errors.As(err, &g) {
		t.Fatalf("error %v, want a *GiveUpError", err)
	}
	return g
}

// TestTransportSideEffectsRetryARefusedConnection: an attempt whose
// connection was refused reached no one, so even a call with side effects
// is attempted again, if its body can be sent again.
func TestTransportSideEffectsRetryARefusedConnection(t *testing.T) {
	addr := closedAddr(t)
	tr := &rebound.Transport{Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay}}
	req, _ := http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodPost, "http://"+addr+"/send", strings.NewReader(`{"to":"x"}`))
	resp, err := tr.RoundTrip(req)
	g := giveUp(t, resp, err)
	if g.Attempts != 3 || g.Reason != rebound.StopAttempts {
		t.Fatalf("%d attempts, stopped by %v; want 3, attempts exhausted (a refused connection sent nothing)", g.Attempts, g.Reason)
	}

	// A body that can be sent only once is not there to send again.
	tr.MaxBufferedBody = -1
	req, _ = http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodPost, "http://"+addr+"/send", io.MultiReader(strings.NewReader(`{"to":"x"}`)))
	resp, err = tr.RoundTrip(req)
	g = giveUp(t, resp, err)
	if g.Attempts != 1 || g.Reason != rebound.StopUnreplayableBody {
		t.Fatalf("a body sent once: %d attempts, stopped by %v; want 1, unreplayable body", g.Attempts, g.Reason)
	}
}

// TestTransportSideEffectsRetryAConnectionNeverMade: net/http says it asked
// for a connection and never got one (a dialer's own error, which is no
// *net.OpError): nothing was written, and the attempt is made again.
func TestTransportSideEffectsRetryAConnectionNeverMade(t *testing.T) {
	var dials atomic.Int32
	base := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("no route today")
	}}
	tr := &rebound.Transport{Base: base, Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay}}
	req, _ := http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodPost, "http://tool.test/send", strings.NewReader(`{}`))
	resp, err := tr.RoundTrip(req)
	g := giveUp(t, resp, err)
	if g.Attempts != 3 || dials.Load() != 3 {
		t.Fatalf("%d attempts, %d dials; want 3 of each", g.Attempts, dials.Load())
	}
}

// TestTransportSideEffectsNotRetriedAfterNetHTTPResent: net/http itself
// sends a GET again on a fresh connection when a reused one closes after
// the request was written; when that fresh dial is refused, its error is
// a dial error, yet the first send reached the server. The attempt got a
// connection, so it may have reached the server, and a call marked with
// side effects is not attempted again.
func TestTransportSideEffectsNotRetriedAfterNetHTTPResent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var served atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		br := bufio.NewReader(conn)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if served.Add(1) == 2 {
				ln.Close() // the fresh dial net/http makes is refused
				return     // and the reused connection closes unanswered
			}
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	}()
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	tr := &rebound.Transport{Base: base, Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay}}
	url := "http://" + ln.Addr().String() + "/act"
	first, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	resp, err := tr.RoundTrip(first)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	req, _ := http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodGet, url, nil)
	resp, err = tr.RoundTrip(req)
	g := giveUp(t, resp, err)
	<-done
	var op *net.OpError
	if !errors.As(g, &op) || op.Op != "dial" {
		t.Fatalf("error %v: the setup did not make net/http send again", g)
	}
	if g.Attempts != 1 || g.Reason != rebound.StopSideEffects {
		t.Fatalf("%d attempts, stopped by %v; want 1, side effects (the request reached the server)", g.Attempts, g.Reason)
	}
}

// TestTransportSideEffectsRetryRefusals: a 429, 503, 529 or 498 is the
// server saying it did not take the request on, so a call with side
// effects is attempted again (after the server's wait, if it asks for
// one); any other failure may have followed what the request did, and is
// not.
func TestTransportSideEffectsRetryRefusals(t *testing.T) {
	for _, tc := range []struct {
		status   int
		requests int
	}{{429, 2}, {503, 2}, {529, 2}, {498, 2}, {500, 1}, {502, 1}, {504, 1}, {408, 1}, {409, 1}} {
		t.Run(strconv.Itoa(tc.status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := &script{statuses: []int{tc.status, 200}, header: http.Header{"Retry-After": {"2"}}}
				tr := &rebound.Transport{Base: &handlerTransport{h: s}, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}
				req, _ := http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodPost, "http://tool.test/send", strings.NewReader(`{}`))
				start := time.Now()
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				want := tc.status
				if tc.requests == 2 {
					want = 200
				}
				if s.count() != tc.requests || resp.StatusCode != want {
					t.Fatalf("%d: %d requests, answered %d; want %d, %d", tc.status, s.count(), resp.StatusCode, tc.requests, want)
				}
				if waited := time.Since(start); tc.requests == 2 && waited != 2*time.Second {
					t.Fatalf("%d: retried after %v, want the server's 2s", tc.status, waited)
				}
			})
		})
	}
}

// TestTransportSideEffectsDroppedAfterTheBodyAttemptedOnce: a connection
// closed after the server read the request may follow what it did; the
// call is attempted once, unless it carries an Idempotency-Key.
func TestTransportSideEffectsDroppedAfterTheBodyAttemptedOnce(t *testing.T) {
	srv, hits := dropServer(t)
	for _, key := range []string{"", "upload-7"} {
		hits.Store(0)
		tr := &rebound.Transport{Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay}}
		req, _ := http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodPost, srv.URL+"/send", strings.NewReader(`{"to":"x"}`))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := tr.RoundTrip(req)
		giveUp(t, resp, err)
		want := int32(1)
		if key != "" {
			want = 3
		}
		if hits.Load() < want || key == "" && hits.Load() != want {
			t.Fatalf("Idempotency-Key %q: %d requests reached the server, want %d", key, hits.Load(), want)
		}
	}
}

// TestTransportSideEffectCallNotContinued: a continuation is a request
// more, which a call with side effects does not make: its cut stream ends
// with the *IncompleteStreamError.
func TestTransportSideEffectCallNotContinued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, _ := chaos.New(chaos.Config{Mode: chaos.ModeText, Seed: 7, Profile: chaos.ProfileAnthropic})
		var requests atomic.Int32
		base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
			requests.Add(1)
			return (&handlerTransport{h: srv}).RoundTrip(r)
		})
		tr := &rebound.Transport{Base: base, Continuations: 2}
		req, _ := http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodPost, "http://chaos.test/v1/messages",
			strings.NewReader(`{"model":"m","max_tokens":500,"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set(chaos.HeaderCutAt, strconv.Itoa(40))
		req.Header.Set(chaos.HeaderCutHow, "close")
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		var ie *rebound.IncompleteStreamError
		if !errors.As(err, &ie) || requests.Load() != 1 {
			t.Fatalf("read ended with %v after %d requests; want an *IncompleteStreamError after 1", err, requests.Load())
		}
	})
}

// TestProviderSideEffects: the model calls of the providers' APIs and the
// safe methods have no side effects; every other request may.
func TestProviderSideEffects(t *testing.T) {
	for _, c := range []struct {
		method, path, body string
		want               bool
	}{
		{"POST", "/v1/chat/completions", `{"model":"m","store":true}`, false},
		{"POST", "/openai/deployments/d1/chat/completions", `{}`, false},
		{"POST", "/v1/completions", `{}`, false},
		{"POST", "/v1/responses", `{"model":"m","input":"hi","store":true,"background":true}`, false},
		{"POST", "/v1/responses", `{"model":"m","input":"say \"conversation\" or \"mcp\""}`, false},
		{"POST", "/v1/responses", `{"model":"m","conversation":"conv_1","input":"hi"}`, true},
		{"POST", "/v1/responses", `{"model":"m","tools":[{"type":"mcp","server_url":"https://x.example"}]}`, true},
		{"POST", "/v1/responses/input_tokens", `{"conversation":"conv_1"}`, false},
		{"POST", "/v1/embeddings", `{}`, false},
		{"POST", "/v1/moderations", `{}`, false},
		{"POST", "/v1/audio/transcriptions", `…`, false},
		{"POST", "/v1/images/generations", `{}`, false},
		{"POST", "/v1/messages", `{"model":"m","max_tokens":5,"messages":[]}`, false},
		{"POST", "/v1/messages", `{"model":"m","mcp_servers":[{"type":"url"}]}`, true},
		{"POST", "/v1/messages/count_tokens", `{}`, false},
		{"POST", "/v1beta/models/gemini-x:generateContent", `{}`, false},
		{"POST", "/v1beta/models/gemini-x:streamGenerateContent", `{}`, false},
		{"POST", "/v1/projects/p/locations/l/publishers/google/models/gemini-x:countTokens", `{}`, false},
		{"POST", "/v1beta/models/e:embedContent", `{}`, false},
		{"POST", "/v1beta/models/e:batchEmbedContents", `{}`, false},
		{"POST", "/v1beta/models/gemini-x:batchGenerateContent", `{}`, true},
		{"POST", "/v1beta/models/veo:predictLongRunning", `{}`, true},
		{"POST", "/api/chat", `{}`, false},
		{"POST", "/api/generate", `{}`, false},
		{"POST", "/api/embed", `{}`, false},
		{"POST", "/api/embeddings", `{}`, false},
		{"POST", "/v2/rerank", `{}`, false},
		{"POST", "/api/create", `{}`, true},
		{"POST", "/api/pull", `{}`, true},
		{"POST", "/v1/files", `{}`, true},
		{"POST", "/v1/batches", `{}`, true},
		{"POST", "/v1/fine_tuning/jobs", `{}`, true},
		{"POST", "/v1/uploads", `{}`, true},
		{"POST", "/v1/vector_stores", `{}`, true},
		{"POST", "/v1/assistants", `{}`, true},
		{"POST", "/v1/threads/thread_1/runs", `{}`, true},
		{"POST", "/v1/threads/thread_1/messages", `{}`, true},
		{"POST", "/v1/threads/runs", `{}`, true},
		{"POST", "/v1/messages/batches", `{}`, true},
		{"POST", "/v1/chat/completions/chatcmpl-1", `{}`, true},
		{"POST", "/v1/chat/completions/", `{}`, true},
		{"POST", "/v1/responses/resp_1/cancel", `{}`, true},
		{"POST", "/v1/conversations", `{}`, true},
		{"POST", "/", `{}`, true},
		{"POST", "", `{}`, true},
		{"PUT", "/v1/chat/completions", `{}`, true},
		{"DELETE", "/v1/files/file-1", ``, true},
		{"PATCH", "/v1/x", `{}`, true},
		{"GET", "/v1/files", ``, false},
		{"HEAD", "/v1/files", ``, false},
		{"OPTIONS", "/v1/files", ``, false},
	} {
		req, err := http.NewRequest(c.method, "http://provider.test"+c.path, strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if got := rebound.ProviderSideEffects(req); got != c.want {
			t.Errorf("%s %s %s: side effects %v, want %v", c.method, c.path, c.body, got, c.want)
		}
	}
}

// TestProviderSideEffectsSeeNamesHoweverSpelled: a name that asks the
// provider to act is found escaped, folded or cut at a NUL, as a key or a
// value at any depth; a body that is not JSON may say anything. A model
// call that names none stays pure, whatever its strings hold.
func TestProviderSideEffectsSeeNamesHoweverSpelled(t *testing.T) {
	for _, c := range []struct {
		path, body string
		want       bool
	}{
		{"/v1/messages", `{"model":"m","mcp_serv\u0065rs":[{"type":"url"}]}`, true},
		{"/v1/messages", `{"model":"m","\u006dcp_servers":[]}`, true},
		{"/v1/messages", `{"model":"m","MCP_SERVERS":[]}`, true},
		{"/v1/messages", `{"model":"m","mcp_\u017fervers":[]}`, true},
		{"/v1/messages", `{"model":"m","mcp_servers\u0000x":[]}`, true},
		{"/v1/messages", `{"model":"m","metadata":{"mcp_servers":1}}`, true},
		{"/v1/messages", `{"model":"m","mcp_servers":[],"mcp_servers":[]}`, true},
		{"/v1/responses", `{"model":"m","tools":[{"type":"m\u0063p","server_url":"https://x.example"}]}`, true},
		{"/v1/responses", `{"model":"m","tools":[{"type":"MCP"}]}`, true},
		{"/v1/responses", `{"model":"m","conv\u0065rsation":"conv_1"}`, true},
		{"/v1/responses", `{"model":"m","input":"conv\u0065rsation"}`, true},
		{"/v1/responses", `{"model":"m","input":"a long text that mentions mcp and conversation"}`, false},
		{"/v1/responses", `{"model":"m","input":"say \"conv\u0065rsation\""}`, false},
		{"/v1/responses", `{"model":"m","input":"hi",}`, true},
		{"/v1/responses", `not json at all`, true},
		{"/v1/messages", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"\u00e9\n"}]}`, false},
	} {
		req, _ := http.NewRequest("POST", "http://provider.test"+c.path, strings.NewReader(c.body))
		if got := rebound.ProviderSideEffects(req); got != c.want {
			t.Errorf("%s %s: side effects %v, want %v", c.path, c.body, got, c.want)
		}
	}
}

// TestProviderSideEffectsReadsTheWholeBody: a name is found wherever it
// falls, across reads, and a body that cannot be read again is taken to
// hold it.
func TestProviderSideEffectsReadsTheWholeBody(t *testing.T) {
	const tail = `{"conversation":"c"}`
	for cut := -12; cut <= 12; cut++ {
		body := strings.Repeat(" ", 8<<10-8+cut) + tail // the name astride the 8 KiB read
		for _, r := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
			req, _ := http.NewRequest("POST", "http://provider.test/v1/responses", strings.NewReader(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(r(strings.NewReader(body))), nil }
			if !rebound.ProviderSideEffects(req) {
				t.Fatalf("conversation %d bytes in: not found", len(body)-len(tail))
			}
		}
	}
	req, _ := http.NewRequest("POST", "http://provider.test/v1/responses", io.MultiReader(strings.NewReader(`{"input":"hi"}`)))
	if !rebound.ProviderSideEffects(req) {
		t.Fatal("a body without GetBody: taken to have no side effects, unread")
	}
	req.GetBody = func() (io.ReadCloser, error) { return nil, errors.New("gone") }
	if !rebound.ProviderSideEffects(req) {
		t.Fatal("a body GetBody cannot give again: taken to have no side effects, unread")
	}
}

// TestTransportProviderSideEffects: with SideEffects set to
// ProviderSideEffects, a request that creates something is attempted once
// after a connection dropped once the server had it; a model call, a GET
// and a request with an Idempotency-Key are attempted again. A body the
// Transport buffers itself (no GetBody) is read for what it asks.
func TestTransportProviderSideEffects(t *testing.T) {
	srv, hits := dropServer(t)
	for _, c := range []struct {
		method, path, body, key string
		noGetBody               bool
		want                    int32
	}{
		{"POST", "/v1/files", `{"purpose":"batch"}`, "", false, 1},
		{"POST", "/v1/threads/thread_1/runs", `{}`, "", false, 1},
		{"POST", "/v1/files", `{"purpose":"batch"}`, "upload-7", false, 3},
		{"POST", "/v1/chat/completions", `{"model":"m"}`, "", false, 3},
		{"GET", "/v1/files", "", "", false, 3},
		{"POST", "/v1/responses", `{"model":"m","input":"hi"}`, "", true, 3},
		{"POST", "/v1/responses", `{"model":"m","conversation":"conv_1"}`, "", true, 1},
		{"POST", "/v1/responses", `{"model":"m","conversation":"conv_1"}`, "", false, 1},
	} {
		hits.Store(0)
		tr := &rebound.Transport{SideEffects: rebound.ProviderSideEffects, Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay}}
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
			if c.noGetBody {
				body = io.MultiReader(body)
			}
		}
		req, _ := http.NewRequestWithContext(t.Context(), c.method, srv.URL+c.path, body)
		if c.key != "" {
			req.Header.Set("Idempotency-Key", c.key)
		}
		resp, err := tr.RoundTrip(req)
		giveUp(t, resp, err)
		// net/http sends a request with an Idempotency-Key (or a GET)
		// again itself on a reused connection: at least as many.
		if got := hits.Load(); got < c.want || c.want == 1 && got != 1 {
			t.Errorf("%s %s %s (Idempotency-Key %q): %d requests reached the server, want %d", c.method, c.path, c.body, c.key, got, c.want)
		}
	}
}

// TestTransportSideEffectsAsksOncePerCall: SideEffects is asked once per
// RoundTrip, not per attempt, and never when the request carries an
// Idempotency-Key.
func TestTransportSideEffectsAsksOncePerCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		asked := 0
		s := &script{statuses: []int{429, 429, 200}}
		tr := &rebound.Transport{Base: &handlerTransport{h: s}, Policy: rebound.Policy{BaseDelay: rebound.NoDelay},
			SideEffects: func(*http.Request) bool { asked++; return true }}
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://provider.test/v1/files", strings.NewReader(`{}`))
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if asked != 1 || s.count() != 3 || resp.StatusCode != 200 {
			t.Fatalf("asked %d times, %d requests, answered %d; want 1, 3 (two refusals), 200", asked, s.count(), resp.StatusCode)
		}
		req.Header.Set("Idempotency-Key", "k")
		req, _ = http.NewRequestWithContext(t.Context(), http.MethodPost, "http://provider.test/v1/files", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "k")
		resp, err = tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if asked != 1 {
			t.Fatalf("asked about a request with an Idempotency-Key")
		}
	})
}

// TestTransportSideEffectsAttemptTimeout: an attempt whose time ran out
// while net/http was still connecting sent nothing, and is made again; one
// whose time ran out once the connection was made may have reached the
// server, and ends the call.
func TestTransportSideEffectsAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dials atomic.Int32
		connecting := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			<-ctx.Done()
			return nil, ctx.Err()
		}}
		defer connecting.CloseIdleConnections()
		tr := &rebound.Transport{Base: connecting, Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: rebound.NoDelay, AttemptTimeout: time.Second}}
		req, _ := http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodPost, "http://tool.test/send", strings.NewReader(`{}`))
		start := time.Now()
		resp, err := tr.RoundTrip(req)
		g := giveUp(t, resp, err)
		if g.Attempts != 3 || dials.Load() != 3 || time.Since(start) != 3*time.Second {
			t.Fatalf("timed out connecting: %d attempts, %d dials in %v; want 3 and 3 in 3s", g.Attempts, dials.Load(), time.Since(start))
		}

		var requests atomic.Int32
		connected := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
			client, server := net.Pipe()
			go func() {
				defer server.Close()
				if _, err := http.ReadRequest(bufio.NewReader(server)); err == nil {
					requests.Add(1)
				}
				io.Copy(io.Discard, server) // no answer, until the client closes
			}()
			return client, nil
		}}
		defer connected.CloseIdleConnections()
		tr.Base = connected
		req, _ = http.NewRequestWithContext(rebound.WithSideEffects(t.Context()), http.MethodPost, "http://tool.test/send", strings.NewReader(`{}`))
		resp, err = tr.RoundTrip(req)
		g = giveUp(t, resp, err)
		synctest.Wait()
		if g.Attempts != 1 || g.Reason != rebound.StopSideEffects || requests.Load() != 1 {
			t.Fatalf("timed out connected: %d attempts, stopped by %v, %d requests; want 1, side effects, 1", g.Attempts, g.Reason, requests.Load())
		}
	})
}
