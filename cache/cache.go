package cache

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/callctx"
	"github.com/rebound-go/rebound/internal/provider"
	"github.com/rebound-go/rebound/internal/sse"
	"github.com/rebound-go/rebound/ratelimit"
)

// Header is the response header that says an answer came from a Cache:
// "hit" (younger than TTL, under Always) or "stale" (served because the
// providers failed).
const Header = "X-Rebound-Cache"

// Outcome is what a Cache did for one request.
type Outcome uint8

const (
	// Bypass: the request could not be cached (side effects, a body
	// that is not JSON, a method other than POST).
	Bypass Outcome = iota
	// Miss: the request went to the providers, and its answer was not
	// kept (yet): not a success, not whole, or Cache-Control: no-store.
	Miss
	// Stored: the answer was read whole and kept.
	Stored
	// Hit: an answer younger than TTL was served, no provider asked.
	Hit
	// Stale: the providers failed, and a stored answer was served.
	Stale
)

var outcomeNames = [...]string{Bypass: "bypass", Miss: "miss", Stored: "stored", Hit: "hit", Stale: "stale"}

func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "Outcome(" + strconv.Itoa(int(o)) + ")"
}

// Cache serves stored answers to requests asked again, by its Config,
// from its Store. It is safe for concurrent use.
type Cache struct {
	cfg   Config
	store Store

	hits, stale, stored, misses atomic.Int64
}

// New returns a Cache that serves by cfg from store; a nil store is a
// Memory bounded by cfg.MaxBytes. It refuses a cfg that Validate refuses.
func New(cfg Config, store Store) (*Cache, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if store == nil {
		store = NewMemory(cfg.MaxBytesOrDefault())
	}
	return &Cache{cfg: cfg, store: store}, nil
}

// Config returns the Config c serves by.
func (c *Cache) Config() Config { return c.cfg }

// Stats is what a Cache has done since it was made, and what its store
// holds.
type Stats struct {
	Hits   int64 // answers served younger than TTL
	Stale  int64 // answers served because the providers failed
	Stored int64 // answers kept
	Misses int64 // requests sent on that could have been served
	// Entries and Bytes are what the store holds, when it can say (a
	// Memory can); -1 otherwise.
	Entries int
	Bytes   int64
}

// Stats returns what c has done, and what its store holds.
func (c *Cache) Stats() Stats {
	s := Stats{Hits: c.hits.Load(), Stale: c.stale.Load(), Stored: c.stored.Load(), Misses: c.misses.Load(), Entries: -1, Bytes: -1}
	if l, ok := c.store.(interface{ Len() (int, int64) }); ok {
		s.Entries, s.Bytes = l.Len()
	}
	return s
}

type callKey struct{}

type call struct {
	scope  Scope
	report func(Outcome)
}

// With returns ctx carrying the Scope of the requests made under it, and
// report, if not nil, which Exchange calls with what it did: at once for
// Bypass, Hit and Stale, and for an answer sent on, with Miss, or with
// Stored once the caller has read it whole and it was kept.
func With(ctx context.Context, scope Scope, report func(Outcome)) context.Context {
	return context.WithValue(ctx, callKey{}, &call{scope: scope, report: report})
}

func callOf(ctx context.Context) *call {
	if c, ok := ctx.Value(callKey{}).(*call); ok {
		return c
	}
	return &call{}
}

func (k *call) note(o Outcome) {
	if k.report != nil {
		k.report(o)
	}
}

// Exchange answers req, whose body is body (nil for none), from the cache
// or by next, by c's Config: under Always it serves an answer younger
// than TTL without calling next; else it calls next, keeps a success as
// the caller reads it, and when next failed (Failed) serves a stored
// answer no older than MaxStale in place of its failure, closing the
// failed response's body. A request with side effects, or one Key
// cannot key, goes to next untouched.
func (c *Cache) Exchange(req *http.Request, body []byte, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	ctx := req.Context()
	k := callOf(ctx)
	if sideEffects(req, body) {
		k.note(Bypass)
		return sent(next(req))
	}
	key, ok := Key(k.scope, req, body)
	if !ok {
		k.note(Bypass)
		return sent(next(req))
	}
	noStore, noCache, maxAge := directives(req.Header)
	if c.cfg.Serve == Always && !noCache {
		ttl := c.cfg.TTLOrDefault()
		if maxAge >= 0 {
			ttl = min(ttl, maxAge)
		}
		if resp, ok := c.serve(req, key, ttl, "hit"); ok {
			c.hits.Add(1)
			k.note(Hit)
			return resp, nil
		}
	}
	resp, err := sent(next(req))
	if Failed(req, resp, err) {
		if !noCache {
			if served, ok := c.serve(req, key, c.cfg.MaxStaleOrDefault(), "stale"); ok {
				if resp != nil {
					resp.Body.Close()
				}
				c.stale.Add(1)
				k.note(Stale)
				return served, nil
			}
		}
		c.misses.Add(1)
		k.note(Miss)
		return resp, err
	}
	c.misses.Add(1)
	k.note(Miss)
	if err == nil && !noStore && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		resp.Body = &keeper{c: c, k: k, key: key, ctx: ctx, resp: resp, body: resp.Body,
			stream: sse.IsStream(resp.Header), limit: c.cfg.MaxBytesOrDefault() / 4}
	}
	return resp, err
}

// sent returns what next returned, the response without a Header of its
// own: only a Cache says an answer came from one, never the server.
func sent(resp *http.Response, err error) (*http.Response, error) {
	if resp != nil {
		resp.Header.Del(Header)
	}
	return resp, err
}

// serve returns the answer stored at key if it is no older than maxAge,
// marked with Header (mark) and Age. A store that fails serves nothing:
// the call goes on as if there were no answer.
func (c *Cache) serve(req *http.Request, key string, maxAge time.Duration, mark string) (*http.Response, bool) {
	e, ok, err := c.store.Get(req.Context(), key)
	if err != nil || !ok {
		return nil, false
	}
	age := time.Since(e.Stored)
	if age >= maxAge {
		return nil, false
	}
	if age < 0 {
		age = 0
	}
	h := e.Header.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h.Set(Header, mark)
	h.Set("Age", strconv.FormatInt(int64(age/time.Second), 10))
	h.Set("Content-Length", strconv.Itoa(len(e.Body)))
	return &http.Response{
		Status: strconv.Itoa(e.Status) + " " + http.StatusText(e.Status), StatusCode: e.Status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(e.Body)), ContentLength: int64(len(e.Body)),
		Request: req,
	}, true
}

// sideEffects reports whether req may make a provider act beyond
// answering, or may be answered otherwise when asked again, so that its
// answer is neither kept nor served. A model call is a POST; a GET reads
// the state of something that changes (a background response, a batch, a
// file), which an answer kept would hide.
func sideEffects(req *http.Request, body []byte) bool {
	if req.Method != http.MethodPost {
		return true
	}
	if req.Header.Get("Idempotency-Key") != "" || callctx.SideEffects(req.Context()) {
		return true
	}
	r := req.WithContext(req.Context())
	r.Body, r.GetBody = http.NoBody, func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	if len(body) > 0 {
		r.Body, _ = r.GetBody()
	}
	return provider.SideEffects(r)
}

// directives reads the request's Cache-Control: no-store keeps nothing,
// no-cache serves nothing, and max-age (-1 when absent) is the age past
// which the caller wants no hit (a browser's reload sends max-age=0).
// Without a Cache-Control, Pragma: no-cache is no-cache, as RFC 9111 has
// it.
func directives(h http.Header) (noStore, noCache bool, maxAge time.Duration) {
	maxAge = -1
	values := h.Values("Cache-Control")
	if len(values) == 0 {
		values = h.Values("Pragma")
	}
	for _, v := range values {
		for d := range strings.SplitSeq(v, ",") {
			d = strings.ToLower(strings.TrimSpace(d))
			switch {
			case d == "no-store":
				noStore = true
			case d == "no-cache":
				noCache = true
			case strings.HasPrefix(d, "max-age="):
				s, err := strconv.ParseUint(strings.Trim(d[len("max-age="):], `"`), 10, 31)
				if err != nil {
					noCache = true // a max-age it cannot read: the strictest
					continue
				}
				if a := time.Duration(s) * time.Second; maxAge < 0 || a < maxAge {
					maxAge = a
				}
			}
		}
	}
	return noStore, noCache, maxAge
}

// Failed reports whether the providers failed req, so that a stored
// answer may stand in for what came: a 5xx (529 among them), a 429 or
// 408 (their retries spent), or an error that is the providers' (a
// connection refused or reset, a timeout, an open breaker, no slot of a
// limit on requests in flight). Not a failure: the caller's own context
// ending, a provider's other 4xx, a Guard's refusal (a spend cap's), a
// request the policy could not send.
func Failed(req *http.Request, resp *http.Response, err error) bool {
	if req.Context().Err() != nil {
		return false
	}
	if err == nil {
		return resp != nil && (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout)
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, ratelimit.ErrNoSlot) {
		return true
	}
	var he *rebound.HTTPError
	if errors.As(err, &he) && he.StatusCode < 500 && he.StatusCode != http.StatusTooManyRequests && he.StatusCode != http.StatusRequestTimeout {
		return false
	}
	var gu *rebound.GiveUpError
	if errors.As(err, &gu) {
		switch gu.Reason {
		case rebound.StopRefused, rebound.StopInvalidPolicy, rebound.StopUnreplayableBody, rebound.StopCanceled:
			return false
		case rebound.StopNotRetryable:
			switch gu.Verdict.Kind {
			case rebound.KindPermanent, rebound.KindContextOverflow, rebound.KindCanceled:
				return false
			}
		}
	}
	return true
}
