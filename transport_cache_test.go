package rebound_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/cache"
)

var _ rebound.ResponseCache = (*cache.Cache)(nil)

// flaky is an upstream that answers while up, and else fails as down
// says: a 503, or a connection refused.
type flaky struct {
	down  atomic.Int32 // 0 up, 1 503s, 2 refused connections
	calls atomic.Int32
}

const (
	up = iota
	unavailable
	refused
)

const answer = `{"choices":[{"message":{"role":"assistant","content":"forty-two"}}]}`

func (f *flaky) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	f.calls.Add(1)
	switch f.down.Load() {
	case unavailable:
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"error":{"message":"down"}}`)), ContentLength: -1, Request: req}, nil
	case refused:
		return nil, &url.Error{Op: "Post", URL: req.URL.String(), Err: syscall.ECONNREFUSED}
	}
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(answer)), ContentLength: int64(len(answer)), Request: req}, nil
}

// events records the events of a Transport: those given to the Observer
// itself, and per call those its observer of the call got.
type events struct {
	mu    sync.Mutex
	calls [][]rebound.Event
}

func (o *events) Observe(rebound.Event) {} // every event of a call goes to its own observer

func (o *events) ObserveCall(context.Context) rebound.Observer {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, nil)
	i := len(o.calls) - 1
	return rebound.ObserverFunc(func(e rebound.Event) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.calls[i] = append(o.calls[i], e)
	})
}

// last returns the events of the latest call, and how many calls there were.
func (o *events) last() ([]rebound.Event, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.calls) == 0 {
		return nil, 0
	}
	return o.calls[len(o.calls)-1], len(o.calls)
}

func types(evs []rebound.Event) []rebound.EventType {
	out := make([]rebound.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// ask posts prompt through rt, reads the answer whole, and returns it.
func ask(t *testing.T, rt http.RoundTripper, prompt string, onceOnly bool) (*http.Response, string) {
	t.Helper()
	var body io.Reader = strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"` + prompt + `"}]}`)
	if onceOnly {
		body = io.NopCloser(body) // no GetBody: the Transport buffers it, if it may
	}
	req, err := http.NewRequest(http.MethodPost, "http://llm.test/v1/chat/completions", body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, err.Error()
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func newCache(t *testing.T, cfg cache.Config) *cache.Cache {
	t.Helper()
	c, err := cache.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTransportServesTheStoredAnswerOnceItsRetriesAreSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, obs := &flaky{}, &events{}
		tr := &rebound.Transport{Base: u, Cache: newCache(t, cache.Config{}),
			Policy: rebound.Policy{MaxAttempts: 3, BaseDelay: 100 * time.Millisecond, Jitter: rebound.JitterNone, Observer: obs}}
		if resp, body := ask(t, tr, "hi", false); resp == nil || resp.StatusCode != 200 || body != answer || resp.Header.Get(cache.Header) != "" {
			t.Fatalf("while up: %v %q", resp, body)
		}
		if evs, _ := obs.last(); len(evs) != 1 || evs[0].Type != rebound.EventAttempt {
			t.Fatalf("a fresh answer's events: %v", types(evs))
		}

		for _, down := range []int32{unavailable, refused} {
			u.down.Store(down)
			time.Sleep(90 * time.Second) // the stored answer ages
			before := u.calls.Load()
			resp, body := ask(t, tr, "hi", false)
			if resp == nil || resp.StatusCode != 200 || body != answer || resp.Header.Get(cache.Header) != "stale" || resp.Header.Get("Age") == "" {
				t.Fatalf("down (%d): %v %q, want the stored answer, marked stale", down, resp, body)
			}
			if n := u.calls.Load() - before; n != 3 {
				t.Errorf("down (%d): %d attempts before the stored answer, want the policy's 3", down, n)
			}
			evs, calls := obs.last()
			if calls != 1+int(down) {
				t.Errorf("%d calls observed, want one each", calls)
			}
			got := types(evs)
			if len(got) < 2 || got[len(got)-2] != rebound.EventGiveUp || got[len(got)-1] != rebound.EventCacheStale {
				t.Fatalf("down (%d): events %v, want the give-up and then the stale answer", down, got)
			}
			e := evs[len(evs)-1]
			var gu *rebound.GiveUpError
			if e.Target != "llm.test" || e.Attempt != 3 || !errors.As(e.Err, &gu) || e.Age < 90*time.Second || e.Elapsed < 300*time.Millisecond || e.Waited != 300*time.Millisecond {
				t.Errorf("down (%d): the stale event %+v", down, e)
			}
		}

		// A request never answered gets the providers' failure, as without
		// a cache.
		if resp, body := ask(t, tr, "something new", false); resp != nil {
			t.Errorf("a request never answered got %v %q, want the refused connection", resp.Status, body)
		}
	})
}

func TestTransportNeverServesARequestWithSideEffectsFromItsCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, c := &flaky{}, newCache(t, cache.Config{Serve: cache.Always})
		policy := rebound.Policy{MaxAttempts: 2, BaseDelay: rebound.NoDelay}
		plain := &rebound.Transport{Base: u, Cache: c, Policy: policy}
		acts := &rebound.Transport{Base: u, Cache: c, Policy: policy, SideEffects: func(*http.Request) bool { return true }}

		ask(t, acts, "send the mail", false)
		if s := c.Stats(); s.Stored != 0 {
			t.Fatalf("an answer with side effects was kept: %+v", s)
		}
		ask(t, plain, "send the mail", false) // the same request, kept this time
		if s := c.Stats(); s.Stored != 1 {
			t.Fatalf("a plain answer was not kept: %+v", s)
		}

		before := u.calls.Load()
		if resp, _ := ask(t, acts, "send the mail", false); resp == nil || resp.Header.Get(cache.Header) != "" || u.calls.Load() == before {
			t.Errorf("a request with side effects was answered from the cache (fresh)")
		}
		u.down.Store(unavailable)
		if resp, _ := ask(t, acts, "send the mail", false); resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("a request with side effects got %v while the provider fails, want its 503", resp)
		}
		if resp, _ := ask(t, plain, "send the mail", false); resp == nil || resp.Header.Get(cache.Header) != "hit" {
			t.Errorf("the same request without side effects got %v, want the stored answer", resp)
		}
	})
}

func TestTransportUnderAlwaysMakesNoAttemptWithinTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, obs := &flaky{}, &events{}
		tr := &rebound.Transport{Base: u, Cache: newCache(t, cache.Config{Serve: cache.Always, TTL: time.Minute}),
			Policy: rebound.Policy{BaseDelay: rebound.NoDelay, Observer: obs}}
		ask(t, tr, "hi", false)
		time.Sleep(30 * time.Second)
		resp, body := ask(t, tr, "hi", false)
		if u.calls.Load() != 1 || resp.Header.Get(cache.Header) != "hit" || resp.Header.Get("Age") != "30" || body != answer {
			t.Fatalf("a repeat within ttl: %d calls, %s %q %q", u.calls.Load(), resp.Header.Get(cache.Header), resp.Header.Get("Age"), body)
		}
		evs, calls := obs.last()
		if calls != 2 || len(evs) != 1 || evs[0].Type != rebound.EventCacheHit || evs[0].Target != "llm.test" || evs[0].Age != 30*time.Second || evs[0].Attempt != 0 {
			t.Errorf("a hit's events (call %d): %+v, want one EventCacheHit", calls, evs)
		}
		time.Sleep(31 * time.Second)
		if resp, _ := ask(t, tr, "hi", false); u.calls.Load() != 2 || resp.Header.Get(cache.Header) != "" {
			t.Errorf("past ttl: %d calls, cache %q; want the provider asked", u.calls.Load(), resp.Header.Get(cache.Header))
		}
	})
}

func TestTransportCachesOnlyWhatItMayBuffer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		u, c := &flaky{}, newCache(t, cache.Config{})
		tr := &rebound.Transport{Base: u, Cache: c, MaxBufferedBody: 16, Policy: rebound.Policy{BaseDelay: rebound.NoDelay}}
		if resp, body := ask(t, tr, "a prompt longer than sixteen bytes", true); resp == nil || body != answer {
			t.Fatalf("a body too large to buffer: %v %q", resp, body)
		}
		if s := c.Stats(); s.Stored != 0 || s.Misses != 0 {
			t.Errorf("a body too large to buffer went through the cache: %+v", s)
		}
		tr.MaxBufferedBody = 0
		ask(t, tr, "a prompt longer than sixteen bytes", true)
		if s := c.Stats(); s.Stored != 1 {
			t.Errorf("a body buffered was not kept: %+v", s)
		}
	})
}
