package cache_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cache"
)

func post(t *testing.T, path, body string) *http.Request {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return req
}

func key(t *testing.T, scope cache.Scope, req *http.Request, body string) string {
	t.Helper()
	k, ok := cache.Key(scope, req, []byte(body))
	if !ok {
		t.Fatalf("Key(%s) cannot be cached", body)
	}
	return k
}

func TestKeyIgnoresKeyOrderWhiteSpaceAndQueryOrder(t *testing.T) {
	a := `{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0}`
	b := "{ \"temperature\":0,\n \"messages\":[{\"content\":\"hi\", \"role\":\"user\"}], \"model\":\"m\" }"
	ra, rb := post(t, "/v1/chat/completions?x=1&a=2", a), post(t, "/v1/chat/completions?a=2&x=1", b)
	if key(t, cache.Scope{}, ra, a) != key(t, cache.Scope{}, rb, b) {
		t.Fatal("the same request with its keys reordered has another key")
	}
}

func TestKeyTellsApartWhatChangesTheAnswer(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	base := key(t, cache.Scope{Tenant: "a", Route: "r"}, post(t, "/v1/messages", body), body)
	withVersion := post(t, "/v1/messages", body)
	withVersion.Header.Set("Anthropic-Version", "2023-06-01")
	cases := map[string]string{
		"tenant":     key(t, cache.Scope{Tenant: "b", Route: "r"}, post(t, "/v1/messages", body), body),
		"route":      key(t, cache.Scope{Tenant: "a", Route: "s"}, post(t, "/v1/messages", body), body),
		"client key": key(t, cache.Scope{Tenant: "a", Route: "r", ClientKey: "sk-1"}, post(t, "/v1/messages", body), body),
		"path":       key(t, cache.Scope{Tenant: "a", Route: "r"}, post(t, "/v1/complete", body), body),
		"header":     key(t, cache.Scope{Tenant: "a", Route: "r"}, withVersion, body),
		"stream":     key(t, cache.Scope{Tenant: "a", Route: "r"}, post(t, "/v1/messages", body), `{"stream":true,`+body[1:]),
		"value":      key(t, cache.Scope{Tenant: "a", Route: "r"}, post(t, "/v1/messages", body), strings.Replace(body, "hi", "ho", 1)),
	}
	for what, k := range cases {
		if k == base {
			t.Errorf("a request that differs by its %s has the same key", what)
		}
	}
	if k1, k2 := key(t, cache.Scope{ClientKey: "sk-1"}, post(t, "/", body), body), key(t, cache.Scope{ClientKey: "sk-2"}, post(t, "/", body), body); k1 == k2 {
		t.Error("two client keys share a key")
	}
}

func TestKeyRefusesWhatParsersReadDifferently(t *testing.T) {
	for _, body := range []string{
		`{"model":"a","model":"b"}`,
		`{"m":{"x":1,"\u0078":2}}`,
		`not json`,
		`{"a":1}{"b":2}`,
		`{"a":1,}`,
		strings.Repeat("[", 200) + strings.Repeat("]", 200),
		strings.Repeat(`{"a":[`, 30) + `"` + strings.Repeat("x", 1<<20) + `"` + strings.Repeat("]}", 30),
	} {
		if _, ok := cache.Key(cache.Scope{}, post(t, "/", body), []byte(body)); ok {
			t.Errorf("Key(%.40s…, %d bytes) can be cached", body, len(body))
		}
	}
	if _, ok := cache.Key(cache.Scope{}, httptest.NewRequest(http.MethodGet, "/v1/models", nil), nil); !ok {
		t.Error("a GET with no body cannot be cached")
	}
}

func TestKeySaysNothingOfTheRequest(t *testing.T) {
	body := `{"secret":"sk-live-123"}`
	k := key(t, cache.Scope{Tenant: "acme", ClientKey: "sk-live-456"}, post(t, "/", body), body)
	if strings.Contains(k, "sk-live") || strings.Contains(k, "acme") || len(k) != 64 {
		t.Fatalf("key %q shows what it keys", k)
	}
}

func TestMemoryHoldsItsBoundEvictingTheLeastRecentlyUsed(t *testing.T) {
	ctx := context.Background()
	m := cache.NewMemory(4000)
	entry := cache.Entry{Status: 200, Body: bytes.Repeat([]byte("x"), 900)}
	for i := range 4 {
		if err := m.Put(ctx, fmt.Sprint(i), entry, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, _ := m.Get(ctx, "0"); !ok { // 0 is now the most recently used
		t.Fatal("answer 0 is gone before the bound was reached")
	}
	m.Put(ctx, "4", entry, time.Hour)
	if _, ok, _ := m.Get(ctx, "1"); ok {
		t.Error("answer 1, used least recently, is still there")
	}
	if _, ok, _ := m.Get(ctx, "0"); !ok {
		t.Error("answer 0, used recently, was let go")
	}
	if n, b := m.Len(); b > 4000 || n != 4 {
		t.Errorf("the store holds %d answers in %d bytes; want 4 within 4000", n, b)
	}
	if err := m.Put(ctx, "big", cache.Entry{Body: make([]byte, 1001)}, time.Hour); !errors.Is(err, cache.ErrTooLarge) {
		t.Errorf("an answer over a quarter of the bound: %v; want ErrTooLarge", err)
	}
}

func TestMemoryLetsAnAnswerGoAfterItsKeepTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		m := cache.NewMemory(0)
		m.Put(ctx, "k", cache.Entry{Status: 200}, time.Minute)
		time.Sleep(59 * time.Second)
		if _, ok, _ := m.Get(ctx, "k"); !ok {
			t.Fatal("the answer is gone before its keep time")
		}
		time.Sleep(time.Second)
		if _, ok, _ := m.Get(ctx, "k"); ok {
			t.Fatal("the answer is kept past its keep time")
		}
		if n, b := m.Len(); n != 0 || b != 0 {
			t.Fatalf("after it went the store holds %d answers, %d bytes", n, b)
		}
	})
}

func TestConfigRefusesBadValuesInOneLine(t *testing.T) {
	for _, c := range []cache.Config{
		{TTL: -time.Second}, {MaxStale: -1}, {MaxBytes: -1}, {MaxBytes: 1}, {MaxBytes: cache.MinMaxBytes - 1}, {Serve: 7},
		{TTL: time.Hour, MaxStale: time.Minute},
	} {
		err := c.Validate()
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("Validate(%+v) = %v; want one line", c, err)
		}
		if _, err := cache.New(c, nil); err == nil {
			t.Errorf("New(%+v) took it", c)
		}
	}
	if err := (cache.Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
	var s cache.Serve
	if err := s.UnmarshalText([]byte("sometimes")); err == nil {
		t.Error(`serve "sometimes" was taken`)
	}
}

// upstream answers what its next field says, and counts its calls.
type upstream struct {
	calls  int
	status int
	err    error
	body   string
	header http.Header
}

func (u *upstream) next(req *http.Request) (*http.Response, error) {
	u.calls++
	if u.err != nil {
		return nil, u.err
	}
	h := u.header.Clone()
	if h == nil {
		h = http.Header{"Content-Type": {"application/json"}}
	}
	return &http.Response{StatusCode: u.status, Header: h, ContentLength: int64(len(u.body)),
		Body: io.NopCloser(strings.NewReader(u.body)), Request: req}, nil
}

// exchange sends body through c to u, reads the answer whole and returns
// it with what the cache reported.
func exchange(t *testing.T, c *cache.Cache, u *upstream, scope cache.Scope, body string, header ...string) (*http.Response, string, []cache.Outcome) {
	t.Helper()
	var got []cache.Outcome
	req := post(t, "/v1/chat/completions", body)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	req = req.WithContext(cache.With(req.Context(), scope, func(o cache.Outcome) { got = append(got, o) }))
	resp, err := c.Exchange(req, []byte(body), u.next)
	if err != nil {
		return nil, err.Error(), got
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b), got
}

const ask = `{"model":"m","messages":[{"role":"user","content":"hi"}]}`

func TestOnFailureServesTheStoredAnswerOnlyWhenTheProvidersFail(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := cache.New(cache.Config{}, nil)
		u := &upstream{status: 200, body: `{"answer":1}`}
		resp, body, got := exchange(t, c, u, cache.Scope{}, ask)
		if body != `{"answer":1}` || resp.Header.Get(cache.Header) != "" || fmt.Sprint(got) != "[miss stored]" {
			t.Fatalf("first call: %q %v %v", body, resp.Header, got)
		}
		u.body = `{"answer":2}`
		if _, body, _ := exchange(t, c, u, cache.Scope{}, ask); body != `{"answer":2}` || u.calls != 2 {
			t.Fatalf("a second call while the provider answers was served %q after %d calls", body, u.calls)
		}
		time.Sleep(90 * time.Second)
		for _, fail := range []*upstream{
			{status: 503, body: `{"error":"down"}`},
			{status: 529, body: `{"error":"overloaded"}`},
			{status: 429, body: `{"error":"slow down"}`},
			{err: &rebound.GiveUpError{Reason: rebound.StopBreakerOpen, Err: errors.New("open")}},
			{err: errors.New("dial tcp: connection refused")},
		} {
			resp, body, got := exchange(t, c, fail, cache.Scope{}, ask)
			if resp == nil || body != `{"answer":2}` || resp.Header.Get(cache.Header) != "stale" || resp.Header.Get("Age") != "90" || fmt.Sprint(got) != "[stale]" {
				t.Errorf("with the provider failing (%d, %v): %v %q %v", fail.status, fail.err, resp, body, got)
			}
		}
		for _, refused := range []*upstream{
			{status: 400, body: `{"error":"bad"}`},
			{status: 401, body: `{"error":"key"}`},
			{err: &rebound.GiveUpError{Reason: rebound.StopRefused, Err: errors.New("spend cap")}},
		} {
			resp, body, _ := exchange(t, c, refused, cache.Scope{}, ask)
			if resp != nil && resp.Header.Get(cache.Header) != "" || body == `{"answer":2}` {
				t.Errorf("in place of the provider's or guard's refusal (%d, %v) the cache served %q", refused.status, refused.err, body)
			}
		}
		if _, body, _ := exchange(t, c, &upstream{status: 503}, cache.Scope{}, strings.Replace(ask, "hi", "new", 1)); body != "" {
			t.Errorf("a request never answered got %q", body)
		}
		if _, body, _ := exchange(t, c, &upstream{status: 503}, cache.Scope{Tenant: "other"}, ask); body != "" {
			t.Errorf("another tenant got %q", body)
		}
		time.Sleep(cache.DefaultMaxStale)
		if resp, _, _ := exchange(t, c, &upstream{status: 503}, cache.Scope{}, ask); resp.StatusCode != 503 {
			t.Errorf("an answer past max_stale was served: %d", resp.StatusCode)
		}
	})
}

func TestAlwaysServesAFreshAnswerWithoutAProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := cache.New(cache.Config{Serve: cache.Always, TTL: time.Minute}, nil)
		u := &upstream{status: 200, body: `{"answer":1}`}
		exchange(t, c, u, cache.Scope{}, ask)
		time.Sleep(59 * time.Second)
		resp, body, got := exchange(t, c, u, cache.Scope{}, ask)
		if u.calls != 1 || body != `{"answer":1}` || resp.Header.Get(cache.Header) != "hit" || fmt.Sprint(got) != "[hit]" {
			t.Fatalf("a repeat within ttl: %d calls, %q, %v, %v", u.calls, body, resp.Header, got)
		}
		if _, _, got := exchange(t, c, u, cache.Scope{}, ask, "Cache-Control", "no-cache"); u.calls != 2 || fmt.Sprint(got) != "[miss stored]" {
			t.Fatalf("no-cache was served from the cache: %d calls, %v", u.calls, got)
		}
		time.Sleep(time.Minute)
		if _, _, got := exchange(t, c, u, cache.Scope{}, ask); u.calls != 3 || fmt.Sprint(got) != "[miss stored]" {
			t.Fatalf("a repeat past ttl did not reach the provider: %d calls, %v", u.calls, got)
		}
	})
}

func TestNothingIsKeptThatIsNotWholeOrMayNotBeKept(t *testing.T) {
	stream := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n"
	sse := http.Header{"Content-Type": {"text/event-stream"}}
	for name, tc := range map[string]struct {
		u      *upstream
		header []string
		body   string
	}{
		"stream without its end": {u: &upstream{status: 200, header: sse, body: stream}, body: `{"stream":true,"m":1}`},
		"no-store":               {u: &upstream{status: 200, body: `{}`}, header: []string{"Cache-Control", "no-store"}, body: ask},
		"idempotency key":        {u: &upstream{status: 200, body: `{}`}, header: []string{"Idempotency-Key", "k"}, body: ask},
		"a 4xx":                  {u: &upstream{status: 404, body: `{}`}, body: ask},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := cache.New(cache.Config{}, nil)
			exchange(t, c, tc.u, cache.Scope{}, tc.body, tc.header...)
			if s := c.Stats(); s.Stored != 0 || s.Entries != 0 {
				t.Fatalf("kept %+v", s)
			}
		})
	}
	t.Run("side effects", func(t *testing.T) {
		c, _ := cache.New(cache.Config{}, nil)
		for _, req := range []*http.Request{
			post(t, "/v1/responses", `{"model":"m","conversation":"conv_1","input":"x"}`),
			post(t, "/v1/batches", `{"input_file_id":"f"}`),
			post(t, "/v1/chat/completions", ask).WithContext(rebound.WithSideEffects(context.Background())),
		} {
			body, _ := io.ReadAll(req.Body)
			resp, _ := c.Exchange(req, body, (&upstream{status: 200, body: `{}`}).next)
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if s := c.Stats(); s.Stored != 0 || s.Misses != 0 {
			t.Fatalf("kept an answer to a request with side effects: %+v", s)
		}
	})
	t.Run("short of its Content-Length", func(t *testing.T) {
		c, _ := cache.New(cache.Config{}, nil)
		u := &upstream{status: 200, body: `{"a":1}`}
		req := post(t, "/", ask)
		resp, _ := c.Exchange(req, []byte(ask), func(r *http.Request) (*http.Response, error) {
			resp, err := u.next(r)
			resp.ContentLength = 100
			return resp, err
		})
		io.ReadAll(resp.Body)
		resp.Body.Close()
		if s := c.Stats(); s.Stored != 0 {
			t.Fatalf("kept a body short of its Content-Length: %+v", s)
		}
	})
	t.Run("closed before its end", func(t *testing.T) {
		c, _ := cache.New(cache.Config{}, nil)
		resp, _ := c.Exchange(post(t, "/", ask), []byte(ask), (&upstream{status: 200, body: `{"a":1}`}).next)
		resp.Body.Read(make([]byte, 2))
		resp.Body.Close()
		if s := c.Stats(); s.Stored != 0 {
			t.Fatalf("kept a body closed half read: %+v", s)
		}
	})
}

func TestAServerCannotSayItsAnswerCameFromTheCache(t *testing.T) {
	c, _ := cache.New(cache.Config{}, nil)
	for _, body := range []string{ask, `not json`} {
		u := &upstream{status: 200, body: `{}`, header: http.Header{cache.Header: {"stale"}}}
		if resp, _, _ := exchange(t, c, u, cache.Scope{}, body); resp.Header.Get(cache.Header) != "" {
			t.Errorf("a server's own %s: %q reached the caller", cache.Header, resp.Header.Get(cache.Header))
		}
	}
}

func TestAStreamIsKeptWholeOnceItEndedAndReplayedAsItCame(t *testing.T) {
	stream := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n" +
		"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
		"data: [DONE]\n\n"
	c, _ := cache.New(cache.Config{}, nil)
	body := `{"model":"m","stream":true}`
	u := &upstream{status: 200, header: http.Header{"Content-Type": {"text/event-stream"}, "X-Ratelimit-Remaining-Requests": {"9"}}, body: stream}
	exchange(t, c, u, cache.Scope{}, body)
	resp, got, _ := exchange(t, c, &upstream{status: 503}, cache.Scope{}, body)
	if got != stream || resp.Header.Get("Content-Type") != "text/event-stream" || resp.Header.Get(cache.Header) != "stale" {
		t.Fatalf("replayed %q with %v", got, resp.Header)
	}
	if resp.Header.Get("X-Ratelimit-Remaining-Requests") != "" {
		t.Error("a stored answer carries the headroom of the moment it was stored")
	}
	if _, got, _ := exchange(t, c, &upstream{status: 503}, cache.Scope{}, `{"model":"m"}`); got == stream {
		t.Error("the non-streamed request was served the stream")
	}
}

func TestAFailedOrUnfinishedAnswerWithA2xxIsNotKept(t *testing.T) {
	for name, u := range map[string]*upstream{
		"a 200 whose body is an error":          {status: 200, body: `{"error":{"message":"overloaded","type":"server_error"}}`},
		"a 200 whose body is Anthropic's error": {status: 200, body: `{"type":"error","error":{"type":"overloaded_error","message":"x"}}`},
		"a 200 whose body is a plain error":     {status: 200, body: `{"error":"model not loaded"}`},
		"a response that failed":                {status: 200, body: `{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error","message":"x"}}`},
		"a response that is incomplete":         {status: 200, body: `{"id":"resp_1","object":"response","status":"incomplete","error":null}`},
		"a response still queued":               {status: 200, body: `{"id":"resp_1","object":"response","status":"queued","error":null}`},
		"a JSON body cut short":                 {status: 200, body: `{"choices":[{"message":{"content":"hal`},
		"a 202 accepted for later":              {status: 202, body: `{"id":"op_1"}`},
		"a 206 partial content":                 {status: 206, body: `{"a":1}`},
	} {
		t.Run(name, func(t *testing.T) {
			c, _ := cache.New(cache.Config{}, nil)
			u.header = http.Header{"Content-Type": {"application/json"}}
			exchange(t, c, u, cache.Scope{}, ask)
			if s := c.Stats(); s.Stored != 0 {
				t.Fatalf("kept %q (%d): %+v", u.body, u.status, s)
			}
		})
	}
	c, _ := cache.New(cache.Config{}, nil)
	exchange(t, c, &upstream{status: 200, body: `{"id":"resp_1","object":"response","status":"completed","error":null,"output":[]}`}, cache.Scope{}, ask)
	if s := c.Stats(); s.Stored != 1 {
		t.Fatalf("a completed response was not kept: %+v", s)
	}
}

func TestAGetOfAResourceThatChangesIsNeverServedFromTheCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := cache.New(cache.Config{Serve: cache.Always}, nil)
		u := &upstream{status: 200, body: `{"id":"resp_1","object":"response","status":"completed"}`}
		for range 2 {
			req := httptest.NewRequest(http.MethodGet, "/v1/batches/batch_1", nil)
			resp, err := c.Exchange(req, nil, u.next)
			if err != nil {
				t.Fatal(err)
			}
			io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if s := c.Stats(); u.calls != 2 || s.Stored != 0 || s.Hits != 0 {
			t.Fatalf("a GET of a batch's state: %d calls, %+v", u.calls, s)
		}
	})
}

func TestAlwaysServesNoHitOlderThanTheRequestsMaxAge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := cache.New(cache.Config{Serve: cache.Always, TTL: time.Hour}, nil)
		u := &upstream{status: 200, body: `{"answer":1}`}
		exchange(t, c, u, cache.Scope{}, ask)
		for _, cc := range []string{"max-age=0", "Max-Age=30", "private, max-age=59"} {
			time.Sleep(time.Minute) // each miss keeps its answer afresh
			calls := u.calls
			if resp, _, _ := exchange(t, c, u, cache.Scope{}, ask, "Cache-Control", cc); u.calls != calls+1 || resp.Header.Get(cache.Header) == "hit" {
				t.Errorf("Cache-Control: %s was served a hit a minute old", cc)
			}
		}
		time.Sleep(time.Second)
		if resp, _, _ := exchange(t, c, u, cache.Scope{}, ask, "Cache-Control", "max-age=120"); resp.Header.Get(cache.Header) != "hit" {
			t.Errorf("Cache-Control: max-age=120 was not served a hit a second old")
		}
		if resp, _, _ := exchange(t, c, u, cache.Scope{}, ask, "Pragma", "no-cache"); resp.Header.Get(cache.Header) == "hit" {
			t.Errorf("Pragma: no-cache was served a hit")
		}
	})
}

// TestAnEncodedAnswerIsNotKept: a body still encoded (the caller asked for
// gzip itself, so its transport left it so) would be served to a caller
// that never asked for the encoding: the key does not say what each
// caller accepts.
func TestAnEncodedAnswerIsNotKept(t *testing.T) {
	c, _ := cache.New(cache.Config{}, nil)
	u := &upstream{status: 200, body: "\x1f\x8b\x08\x00binary", header: http.Header{"Content-Type": {"audio/mpeg"}, "Content-Encoding": {"gzip"}}}
	exchange(t, c, u, cache.Scope{}, ask, "Accept-Encoding", "gzip")
	if s := c.Stats(); s.Stored != 0 {
		t.Fatalf("kept a gzip-encoded body: %+v", s)
	}
}
