package reboundredis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/cache"
)

// testCache is a Cache of cfg on the test Redis: see testConfig.
func testCache(t testing.TB, cfg CacheConfig) (*Cache, Config) {
	t.Helper()
	sc := testConfig(t, redisURL())
	s, err := New(sc)
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCache(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, sc
}

// streamedAnswer is a streamed answer of n bytes or a little more: events
// ended by \r\n\r\n, whose data holds every byte value, NUL and invalid
// UTF-8 among them, ended by the provider's own end.
func streamedAnswer(n int) []byte {
	var every [256]byte
	for i := range every {
		every[i] = byte(i)
	}
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "event: content_block_delta\r\ndata: {\"i\":%d,\"raw\":\"", i)
		b.Write(every[:])
		b.WriteString("\"}\r\n\r\n")
	}
	b.WriteString("event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n")
	return b.Bytes()
}

func streamedEntry(n int) cache.Entry {
	return cache.Entry{
		Status: http.StatusOK,
		Header: http.Header{
			"Content-Type": {"text/event-stream; charset=utf-8"},
			"Request-Id":   {"req_1"},
			"Vary":         {"Accept-Encoding", "Authorization"},
			"X-Empty":      {""},
		},
		Body:   streamedAnswer(n),
		Stored: time.Date(2025, 3, 14, 15, 9, 26, 535897932, time.UTC),
	}
}

// sameEntry fails the test unless got is want, byte for byte.
func sameEntry(t *testing.T, got, want cache.Entry) {
	t.Helper()
	if got.Status != want.Status || !got.Stored.Equal(want.Stored) || !reflect.DeepEqual(got.Header, want.Header) {
		t.Errorf("got status %d, stored %v, header %v; want %d, %v, %v", got.Status, got.Stored, got.Header, want.Status, want.Stored, want.Header)
	}
	if !bytes.Equal(got.Body, want.Body) {
		t.Errorf("got a body of %d bytes that differs from the %d stored", len(got.Body), len(want.Body))
	}
}

// TestCacheKeepsAnAnswerByteForByte: an answer comes back as it was kept,
// its streamed body with \r\n and every byte value exact, its header's
// values, its status and its stored time to the nanosecond; one longer
// than a reply carries at once (64 KiB) too, in its second read.
func TestCacheKeepsAnAnswerByteForByte(t *testing.T) {
	c, _ := testCache(t, CacheConfig{})
	ctx := context.Background()
	for _, n := range []int{0, 3000, 300 << 10} {
		key := fmt.Sprintf("answer-%d", n)
		want := streamedEntry(n)
		if err := c.Put(ctx, key, want, time.Hour); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		got, ok, err := c.Get(ctx, key)
		if err != nil || !ok {
			t.Fatalf("%d bytes: ok %v, %v; want the answer", n, ok, err)
		}
		sameEntry(t, got, want)
	}
	if _, ok, err := c.Get(ctx, "never-kept"); ok || err != nil {
		t.Errorf("a key never kept: ok %v, %v; want a miss", ok, err)
	}
}

// TestCacheAnswerExpiresAtKeep: an answer's key expires after Put's keep,
// by Redis's own clock (PTTL read, not waited for); a keep of zero keeps
// nothing. Keys are the prefix, "cache:" and the cache key.
func TestCacheAnswerExpiresAtKeep(t *testing.T) {
	c, cfg := testCache(t, CacheConfig{})
	ctx := context.Background()
	const keep = 90 * time.Minute
	if err := c.Put(ctx, "k", streamedEntry(100), keep); err != nil {
		t.Fatal(err)
	}
	left, err := cfg.Client.PTTL(ctx, cfg.Prefix+"cache:k").Result()
	if err != nil {
		t.Fatal(err)
	}
	if left > keep || left < keep-patience {
		t.Errorf("the answer's key expires in %v; want %v", left, keep)
	}
	if err := c.Put(ctx, "k0", streamedEntry(100), 0); err != nil {
		t.Fatal(err)
	}
	if n := cfg.Client.Exists(ctx, cfg.Prefix+"cache:k0").Val(); n != 0 {
		t.Errorf("a keep of zero left a key")
	}
}

// TestCacheIsSharedByStoresOnOneRedis: what one replica's store keeps,
// another's, with a client of its own and the same prefix, serves.
func TestCacheIsSharedByStoresOnOneRedis(t *testing.T) {
	a, cfg := testCache(t, CacheConfig{})
	other, err := open(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Client.Close()
	other.Prefix = cfg.Prefix
	s, err := New(other)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewCache(s, CacheConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	want := streamedEntry(5000)
	if err := a.Put(ctx, "shared", want, time.Hour); err != nil {
		t.Fatal(err)
	}
	got, ok, err := b.Get(ctx, "shared")
	if err != nil || !ok {
		t.Fatalf("the other store: ok %v, %v; want the answer", ok, err)
	}
	sameEntry(t, got, want)
	// And through two caches: the second serves what the first kept, in
	// place of its providers' failure.
	ca, err := cache.New(cache.Config{}, a)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := cache.New(cache.Config{}, b)
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	ask := func(c *cache.Cache, status int) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "https://api.example/v1/chat/completions", bytes.NewReader(body))
		req = req.WithContext(cache.With(ctx, cache.Scope{Tenant: "t", Route: "r"}, nil))
		resp, err := c.Exchange(req, body, func(*http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: status, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"answer":42}`)), ContentLength: -1}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	io.ReadAll(ask(ca, http.StatusOK).Body)
	resp := ask(cb, http.StatusServiceUnavailable)
	got2, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(cache.Header) != "stale" || string(got2) != `{"answer":42}` {
		t.Errorf("the second cache, its providers down: %d %q %q; want the first's answer, stale", resp.StatusCode, resp.Header.Get(cache.Header), got2)
	}
}

// TestCacheValueThatDoesNotDecodeIsAMiss: a value that is not an answer as
// this package keeps it (a foreign one, a cut one, a later version's) is a
// miss, not an error.
func TestCacheValueThatDoesNotDecodeIsAMiss(t *testing.T) {
	c, cfg := testCache(t, CacheConfig{})
	ctx := context.Background()
	whole := string(appendEntry(nil, streamedEntry(100)))
	for name, v := range map[string]string{
		"empty":           "",
		"foreign":         "{\"status\":200}",
		"later version":   "\x02" + whole[1:],
		"status 0":        "\x01\x00" + whole[3:],
		"cut in a header": whole[:30],
		"a huge count":    "\x01\xc8\x01\x00\x00\xff\xff\xff\xff\x0f",
	} {
		if err := cfg.Client.Set(ctx, cfg.Prefix+"cache:"+name, v, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if e, ok, err := c.Get(ctx, name); ok || err != nil {
			t.Errorf("%s: %+v, ok %v, %v; want a miss", name, e, ok, err)
		}
	}
}

// TestCacheRefusesAnAnswerOverMaxEntryBytes: an answer longer than
// MaxEntryBytes as Redis would keep it is refused with cache.ErrTooLarge,
// and nothing is written; one of exactly that length is kept.
func TestCacheRefusesAnAnswerOverMaxEntryBytes(t *testing.T) {
	e := streamedEntry(2000)
	n := entryLen(e)
	if got := len(appendEntry(nil, e)); got != n {
		t.Fatalf("entryLen says %d bytes, appendEntry writes %d", n, got)
	}
	c, cfg := testCache(t, CacheConfig{MaxEntryBytes: n})
	ctx := context.Background()
	if err := c.Put(ctx, "fits", e, time.Hour); err != nil {
		t.Errorf("an answer of MaxEntryBytes: %v", err)
	}
	e.Body = append(e.Body, '\n')
	if err := c.Put(ctx, "over", e, time.Hour); !errors.Is(err, cache.ErrTooLarge) {
		t.Errorf("an answer a byte over MaxEntryBytes: %v; want cache.ErrTooLarge", err)
	}
	if cfg.Client.Exists(ctx, cfg.Prefix+"cache:over").Val() != 0 {
		t.Errorf("the answer refused was written")
	}
	if _, err := NewCache(c.store, CacheConfig{MaxEntryBytes: -1}); err == nil {
		t.Errorf("a negative MaxEntryBytes was taken")
	}
	if _, err := NewCache(nil, CacheConfig{}); err == nil {
		t.Errorf("a nil Store was taken")
	}
}

// TestCacheReadsNoAnswerLongerThanItKeeps: an answer another replica kept,
// longer than this one's MaxEntryBytes, is a miss, not read.
func TestCacheReadsNoAnswerLongerThanItKeeps(t *testing.T) {
	big, _ := testCache(t, CacheConfig{})
	ctx := context.Background()
	if err := big.Put(ctx, "long", streamedEntry(100<<10), time.Hour); err != nil {
		t.Fatal(err)
	}
	small, err := NewCache(big.store, CacheConfig{MaxEntryBytes: 80 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := small.Get(ctx, "long"); ok || err != nil {
		t.Errorf("an answer over MaxEntryBytes: ok %v, %v; want a miss", ok, err)
	}
}

// TestCacheErrorsDoNotShowTheKey: a cache key is a hash of its request
// and stays out of logs, even when a foreign key of another type stands
// where the answer lives and the error names where.
func TestCacheErrorsDoNotShowTheKey(t *testing.T) {
	c, cfg := testCache(t, CacheConfig{})
	ctx := context.Background()
	const key = "4f1c0ffee5ecret"
	cfg.Client.RPush(ctx, cfg.Prefix+"cache:"+key, "x")
	_, ok, err := c.Get(ctx, key)
	if ok || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("a list at the answer's key: ok %v, %v; want a miss saying WRONGTYPE", ok, err)
	}
	if strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), cfg.Prefix+"cache:") {
		t.Errorf("the error %q shows the key, or not where it lives", err)
	}
}

// TestCacheOnAGoneRedis: with its Redis killed, a store's Get is a miss
// and its Put an error, both saying Redis is unavailable; neither waits
// (how long they may is TestCacheWaitsForAStalledRedisNoLongerThanTimeout).
func TestCacheOnAGoneRedis(t *testing.T) {
	srv := startRedis(t)
	s, err := New(testConfig(t, srv.URL()))
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewCache(s, CacheConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := streamedEntry(1000)
	if err := c.Put(ctx, "k", e, time.Hour); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if _, ok, err := c.Get(ctx, "k"); ok || !errors.Is(err, ErrUnavailable) {
		t.Errorf("Get on a gone Redis: ok %v, %v; want a miss, ErrUnavailable", ok, err)
	}
	if err := c.Put(ctx, "k", e, time.Hour); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Put on a gone Redis: %v; want ErrUnavailable", err)
	}
}

// TestCacheWaitsForAStalledRedisNoLongerThanTimeout: on a Redis that
// stopped answering, a Get waits the Store's Timeout, and then neither a
// Get nor a Put waits at all until RetryEvery has passed; a Put then waits
// its Timeout and a millisecond for each 64 KiB it carries.
func TestCacheWaitsForAStalledRedisNoLongerThanTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var f fakeRedis
		s, closeClient := fakeStore(t, Config{}, &f)
		defer closeClient()
		c, err := NewCache(s, CacheConfig{})
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		e := streamedEntry(1 << 20)
		var ok bool
		if d := timed(func() { _, ok, err = c.Get(ctx, "k") }); d != DefaultTimeout || ok || !errors.Is(err, ErrUnavailable) {
			t.Errorf("Get on a stalled Redis: ok %v, %v after %v; want a miss after %v", ok, err, d, DefaultTimeout)
		}
		if d := timed(func() { _, ok, err = c.Get(ctx, "k") }); d != 0 || ok || !errors.Is(err, ErrUnavailable) {
			t.Errorf("Get with Redis away: ok %v, %v after %v; want a miss at once", ok, err, d)
		}
		if d := timed(func() { err = c.Put(ctx, "k", e, time.Hour) }); d != 0 || !errors.Is(err, ErrUnavailable) {
			t.Errorf("Put with Redis away: %v after %v; want ErrUnavailable at once", err, d)
		}
		time.Sleep(DefaultRetryEvery)
		want := DefaultTimeout + time.Duration(entryLen(e)>>16)*time.Millisecond
		if d := timed(func() { err = c.Put(ctx, "k", e, time.Hour) }); d != want || !errors.Is(err, ErrUnavailable) {
			t.Errorf("Put of %d bytes on a stalled Redis: %v after %v; want ErrUnavailable after %v", entryLen(e), err, d, want)
		}
	})
}

// TestCacheReplyOfAnotherKindIsNotShown: a reply to a read that is
// neither a value nor a length (something between this process and
// Redis) is a miss and an error that does not quote it.
func TestCacheReplyOfAnotherKindIsNotShown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := fakeRedis{}
		f.answers(func(string, redis.Cmder) any { return []any{"an answer's secret"} })
		s, closeClient := fakeStore(t, Config{}, &f)
		defer closeClient()
		c, _ := NewCache(s, CacheConfig{})
		_, ok, err := c.Get(context.Background(), "k")
		if ok || !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "secret") {
			t.Errorf("an odd reply: ok %v, %v; want a miss, ErrUnavailable, the reply unquoted", ok, err)
		}
	})
}

// FuzzCacheEntry: decoding any value does not panic, and what decodes is kept again as the same answer.
func FuzzCacheEntry(f *testing.F) {
	f.Add(appendEntry(nil, streamedEntry(300)))
	f.Add(appendEntry(nil, cache.Entry{Status: 204}))
	f.Add([]byte("\x01\xc8\x01\x00\x00\x01\x05"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, ok := decodeEntry(string(b))
		if !ok {
			return
		}
		again, ok := decodeEntry(string(appendEntry(nil, e)))
		if !ok {
			t.Fatalf("%+v, decoded, does not decode once kept again", e)
		}
		sameEntry(t, again, e)
	})
}

// A Get and a Put of an answer of 2 KiB (a chat answer) and of 256 KiB (a
// long stream, read in two round trips), one round trip each on the
// test's Redis.
func BenchmarkCache(b *testing.B) {
	c, _ := testCache(b, CacheConfig{})
	ctx := context.Background()
	for _, n := range []int{2 << 10, 256 << 10} {
		e := streamedEntry(n)
		key := fmt.Sprintf("bench-%d", n)
		if err := c.Put(ctx, key, e, time.Hour); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("Get/%dKiB", n>>10), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok, err := c.Get(ctx, key); !ok || err != nil {
					b.Fatalf("ok %v, %v", ok, err)
				}
			}
		})
		b.Run(fmt.Sprintf("Put/%dKiB", n>>10), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.Put(ctx, key, e, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
