package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/proxy"
)

// frontOf starts a proxy in front of upstream, served over loopback, its
// access log into logs if not nil.
func frontOf(t *testing.T, upstream string, logs io.Writer) *httptest.Server {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	p, err := proxy.New(proxy.Options{Upstream: upstream, Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	front := httptest.NewServer(p)
	t.Cleanup(front.Close)
	return front
}

// TestHopByHopHeadersGoNeitherWay: the headers of one connection (RFC
// 9110's, RFC 2616's and those a Connection header names) stay on their
// side of the proxy, in a request and in its answer; the client's
// forwarding headers and its Connection: close do not reach the upstream,
// its "TE: trailers" does, without the rest of its TE; a request without
// a User-Agent goes without one; a query an upstream could read otherwise
// goes as net/url reads it; the end-to-end headers go both ways.
func TestHopByHopHeadersGoNeitherWay(t *testing.T) {
	type seen struct {
		header http.Header
		close  bool
		query  string
	}
	got := make(chan seen, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- seen{r.Header.Clone(), r.Close, r.URL.RawQuery}
		h := w.Header()
		h.Set("Connection", "X-Hop-Res")
		h.Set("X-Hop-Res", "1")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", `Basic realm="up"`)
		h.Set("Proxy-Connection", "keep-alive")
		h.Set("Upgrade", "h2c")
		h.Set("X-End-To-End", "answer")
		h.Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	defer up.Close()
	front := frontOf(t, up.URL, nil)

	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const body = `{"model":"gpt-x"}`
	fmt.Fprintf(conn, "POST /v1/chat/completions?d=4;e=5&c=%%zz&f=6 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"+
		"Connection: close, X-Hop-Req\r\nX-Hop-Req: 1\r\nProxy-Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n"+
		"Proxy-Authorization: Basic dTpw\r\nTE: deflate, Trailers\r\n"+
		"Forwarded: for=203.0.113.9\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Host: evil.example\r\nX-Forwarded-Proto: https\r\n"+
		"X-End-To-End: request\r\n\r\n%s", len(body), body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	s := <-got
	for _, k := range []string{"Connection", "X-Hop-Req", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization",
		"Forwarded", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "User-Agent"} {
		if v, ok := s.header[k]; ok {
			t.Errorf("the upstream got %s: %q", k, v)
		}
	}
	if v := s.header.Values("Te"); len(v) != 1 || v[0] != "trailers" {
		t.Errorf("the upstream got TE %q; want [trailers]", v)
	}
	if v := s.header.Get("X-End-To-End"); v != "request" {
		t.Errorf("the upstream got X-End-To-End %q; want request", v)
	}
	if s.close {
		t.Error("the client's Connection: close reached the upstream")
	}
	if s.query != "f=6" {
		t.Errorf("the upstream got the query %q; want f=6 (what net/url reads of it)", s.query)
	}

	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	for _, k := range []string{"X-Hop-Res", "Keep-Alive", "Proxy-Authenticate", "Proxy-Connection", "Upgrade"} {
		if v, ok := resp.Header[k]; ok {
			t.Errorf("the client got %s: %q", k, v)
		}
	}
	if v := resp.Header.Get("X-End-To-End"); v != "answer" {
		t.Errorf("the client got X-End-To-End %q; want answer", v)
	}
}

// TestTrailersReachTheClient: an answer's trailers come after its body,
// those the upstream announced announced to the client too, and those it
// did not still sent (all of them then as unannounced ones).
func TestTrailersReachTheClient(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, `{}`)
		w.Header().Set("X-Checksum", "c1")
		if r.URL.Path == "/v1/late" {
			w.Header().Set(http.TrailerPrefix+"X-Late", "l1")
		}
	}))
	defer up.Close()
	front := frontOf(t, up.URL, nil)
	for _, c := range []struct {
		path      string
		announced []string
		want      http.Header
	}{
		{"/v1/chat/completions", []string{"X-Checksum"}, http.Header{"X-Checksum": {"c1"}}},
		{"/v1/late", []string{"X-Checksum"}, http.Header{"X-Checksum": {"c1"}, "X-Late": {"l1"}}},
	} {
		resp, err := http.Post(front.URL+c.path, "application/json", strings.NewReader(`{"model":"gpt-x"}`))
		if err != nil {
			t.Fatal(err)
		}
		var announced []string
		for k := range resp.Trailer {
			announced = append(announced, k)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != `{}` {
			t.Errorf("%s: body %q, %v", c.path, b, err)
		}
		if fmt.Sprint(announced) != fmt.Sprint(c.announced) {
			t.Errorf("%s: trailers announced %v; want %v", c.path, announced, c.announced)
		}
		if fmt.Sprint(resp.Trailer) != fmt.Sprint(c.want) {
			t.Errorf("%s: trailers %v; want %v", c.path, resp.Trailer, c.want)
		}
	}
}

// TestStreamFlushedEventByEvent: each event of a stream reaches the
// client before the upstream sends the next, which it does only once the
// client has read the one before.
func TestStreamFlushedEventByEvent(t *testing.T) {
	events := []string{
		`data: {"choices":[{"index":0,"delta":{"content":"A"}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"B"}}]}` + "\n\n",
		`data: {"choices":[{"index":0,"delta":{"content":"C"},"finish_reason":"stop"}]}` + "\n\n",
		"data: [DONE]\n\n",
	}
	read := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i, e := range events {
			if i > 0 {
				select {
				case <-read:
				case <-r.Context().Done():
					return
				}
			}
			io.WriteString(w, e)
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	front := frontOf(t, up.URL, nil)
	// Bounded: a proxy that held an event back would leave the read
	// waiting for the upstream, which waits for it.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front.URL+"/v1/chat/completions", strings.NewReader(`{"model":"gpt-x","stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	for i, want := range events {
		if i > 0 {
			read <- struct{}{}
		}
		b := make([]byte, len(want))
		if _, err := io.ReadFull(resp.Body, b); err != nil || string(b) != want {
			t.Fatalf("event %d: read %q, %v; want %q", i, b, err, want)
		}
	}
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Errorf("after the stream: %q, %v", rest, err)
	}
}

// TestBrokenAnswerBreaksTheClients: an answer that breaks off after its
// header reaches the client broken, never as a whole shorter one: a
// stream after the events that came (its header went at once), an answer
// of known length before its header (it went out in one piece, so
// nothing had); its access line says so.
func TestBrokenAnswerBreaksTheClients(t *testing.T) {
	const (
		event = `data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}` + "\n\n"
		part  = `{"choices":[{"index":0,"message":`
	)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/completions") {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, event)
		} else {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, part)
		}
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	defer up.Close()
	var logs syncBuffer
	front := frontOf(t, up.URL, &logs)

	resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || string(b) != event || resp.StatusCode != http.StatusOK {
		t.Errorf("stream: %d, read %q, %v; want 200, %q and an error", resp.StatusCode, b, err, event)
	}
	if resp, err := http.Post(front.URL+"/v1/messages", "application/json", strings.NewReader(`{"model":"claude-x"}`)); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Errorf("answer of known length: %d, %q; want no answer", resp.StatusCode, b)
	}
	front.Close() // the access lines are written
	lines := accessLines(t, logs.String())
	if len(lines) != 2 {
		t.Fatalf("%d access lines; want 2\n%s", len(lines), logs.String())
	}
	for _, l := range lines {
		if l["broken"] != true {
			t.Errorf("%s: broken %v; want true", l["path"], l["broken"])
		}
	}
}

// TestAnErrorEventAfterContentReachesTheClient: a stream that the
// provider ends with its in-band error event after content (nothing can
// be retried) reaches the client with that event, byte for byte as the
// provider sent it, and then ends, in every dialect: the client's SDK
// raises the provider's own error, rather than a dropped connection. The
// chaos server in text mode cuts each stream so; the same request sent
// to it directly shows what the provider sent. The access line still
// says the answer broke.
func TestAnErrorEventAfterContentReachesTheClient(t *testing.T) {
	srv, err := chaos.New(chaos.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(srv)
	defer up.Close()
	var logs syncBuffer
	front := frontOf(t, up.URL, &logs)
	user := `"messages":[{"role":"user","content":"Say something."}]`
	cases := []struct{ profile, path, body string }{
		{chaos.ProfilePlain, "/v1/generate", `{"stream":true,` + user + `}`},
		{chaos.ProfileOpenAI, "/v1/chat/completions", `{"model":"gpt-x","stream":true,` + user + `}`},
		{chaos.ProfileOpenAI, "/v1/responses", `{"model":"gpt-x","stream":true,"input":"Say something."}`},
		{chaos.ProfileAnthropic, "/v1/messages", `{"model":"claude-x","stream":true,"max_tokens":1024,` + user + `}`},
		{chaos.ProfileGemini, "/v1beta/models/gemini-x:streamGenerateContent?alt=sse", `{"contents":[{"role":"user","parts":[{"text":"Say something."}]}]}`},
	}
	post := func(base, path, body, profile string) (string, error) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(chaos.HeaderMode, chaos.ModeText)
		req.Header.Set(chaos.HeaderProfile, profile)
		req.Header.Set(chaos.HeaderCutAt, "20")
		req.Header.Set(chaos.HeaderCutHow, "error")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for _, c := range cases {
		direct, err := post(up.URL, c.path, c.body, c.profile)
		events := strings.SplitAfter(strings.TrimSuffix(direct, "\n\n"), "\n\n")
		event := events[len(events)-1] + "\n\n" // what the provider ended with
		if err != nil || len(events) < 3 || !strings.Contains(event, "error") {
			t.Fatalf("%s: the chaos server sent %q, %v; want content, then an error event", c.path, direct, err)
		}
		got, err := post(front.URL, c.path, c.body, c.profile)
		if err != nil || !strings.HasSuffix(got, "\n\n"+event) || strings.Count(got, event) != 1 {
			t.Errorf("%s: through the proxy the client read %q, %v; want it to end cleanly with the provider's %q", c.path, got, err, event)
		}
	}
	front.Close() // the access lines are written
	for _, l := range accessLines(t, logs.String()) {
		if l["broken"] != true || l["stream"] != true {
			t.Errorf("%s: broken %v, stream %v; want both true", l["path"], l["broken"], l["stream"])
		}
	}
}

// TestUnaskedSwitchIsAGatewayError: an upstream that switches protocols
// for a request that asked for no upgrade gets the client a 502, never a
// tunnel to it.
func TestUnaskedSwitchIsAGatewayError(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello")
		brw.Flush()
	}))
	defer up.Close()
	front := frontOf(t, up.URL, nil)
	resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(b), "hello") {
		t.Errorf("status %d, body %q; want a 502 of the proxy's", resp.StatusCode, b)
	}
}

// TestAnswerLeavesBeforeTheAccessLine: an answer of known length reaches
// the client as soon as its last byte is written, before the proxy
// settles the call and writes its access line (which would otherwise
// stand between every answer and its client).
func TestAnswerLeavesBeforeTheAccessLine(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, canned) // small and unflushed: sent with its length
	}))
	defer up.Close()
	clientHas := make(chan struct{})
	logs := &heldLog{clientHas: clientHas, before: make(chan bool, 1)}
	front := frontOf(t, up.URL, logs)
	got := make(chan error, 1)
	go func() {
		defer close(clientHas)
		resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-x"}`))
		if err != nil {
			got <- err
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && (string(b) != canned || resp.ContentLength != int64(len(canned))) {
			err = fmt.Errorf("answer %q (length %d); want %q with its length", b, resp.ContentLength, canned)
		}
		got <- err
	}()
	if before := <-logs.before; !before {
		t.Error("the access line was written before the client had its whole answer")
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// heldLog holds the access line until the client has its answer, or for
// at most a few seconds (so that a proxy that writes it first fails
// rather than hangs), and says on before which came first.
type heldLog struct {
	clientHas <-chan struct{}
	before    chan bool
}

func (l *heldLog) Write(b []byte) (int, error) {
	if strings.Contains(string(b), `"msg":"request"`) {
		select {
		case <-l.clientHas:
			l.before <- true
		case <-time.After(3 * time.Second):
			l.before <- false
		}
	}
	return len(b), nil
}

// TestStreamHeaderGoesWithItsFirstEvent: a stream's header is not flushed
// on its own (the Transport has looked ahead to the first content, so
// the two go in one write, and the client wakes once for them), and
// every event is flushed as it is written.
func TestStreamHeaderGoesWithItsFirstEvent(t *testing.T) {
	p, err := proxy.New(proxy.Options{Upstream: "http://upstream.test", Base: cannedStream{},
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	w := &flushLog{ResponseRecorder: httptest.NewRecorder()}
	req := httptest.NewRequest("POST", "http://127.0.0.1:8080/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-x","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	p.ServeHTTP(w, req)
	if w.Code != 200 || w.Body.String() != cannedSSE {
		t.Fatalf("status %d, body %q", w.Code, w.Body)
	}
	if len(w.flushedAt) == 0 || w.flushedAt[0] == 0 {
		t.Errorf("flushes after %v bytes of the body; want the first after some", w.flushedAt)
	}
	if last := w.flushedAt[len(w.flushedAt)-1]; last != len(cannedSSE) {
		t.Errorf("the last flush after %d bytes; want all %d flushed", last, len(cannedSSE))
	}
}

// flushLog notes how much of the body had been written at each flush.
type flushLog struct {
	*httptest.ResponseRecorder
	flushedAt []int
}

func (f *flushLog) Flush() {
	f.flushedAt = append(f.flushedAt, f.Body.Len())
	f.ResponseRecorder.Flush()
}

// TestStreamNotLookedIntoHasItsHeaderAtOnce: an event stream the
// Transport does not look into (answered 201, say) has no content in hand
// when its header is written: the header reaches the client at once, not
// with the first event, which may be long in coming.
func TestStreamNotLookedIntoHasItsHeaderAtOnce(t *testing.T) {
	clientHas := make(chan struct{})
	headerFirst := make(chan bool, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusCreated)
		w.(http.Flusher).Flush()
		select { // bounded, so that a proxy that holds the header fails rather than hangs
		case <-clientHas:
			headerFirst <- true
		case <-time.After(3 * time.Second):
			headerFirst <- false
		}
		io.WriteString(w, "data: {}\n\n")
	}))
	defer up.Close()
	front := frontOf(t, up.URL, nil)
	resp, err := http.Post(front.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"gpt-x","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	close(clientHas)
	defer resp.Body.Close()
	if !<-headerFirst {
		t.Error("the client had the header only with the first event")
	}
	if b, err := io.ReadAll(resp.Body); err != nil || resp.StatusCode != http.StatusCreated || string(b) != "data: {}\n\n" {
		t.Errorf("status %d, body %q, %v", resp.StatusCode, b, err)
	}
}
