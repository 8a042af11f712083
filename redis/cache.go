package reboundredis

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/cache"
)

// CacheConfig configures a Cache.
type CacheConfig struct {
	// MaxEntryBytes bounds one answer as Redis keeps it: its body, its
	// header and a few bytes of framing. A larger answer is refused with
	// cache.ErrTooLarge, without a round trip. It bounds what one Get
	// waits for too. Zero means DefaultMaxEntryBytes (16 MiB), what a
	// cache.Cache keeps of one answer with the default cache.Config
	// (a quarter of its MaxBytes).
	MaxEntryBytes int
}

// DefaultMaxEntryBytes is the largest answer a zero CacheConfig keeps.
const DefaultMaxEntryBytes = 16 << 20

// Cache is a cache.Store on Redis, shared by the replicas of a service:
// an answer one replica kept is served by every other. Give it to
// cache.New. It is safe for concurrent use. Make one with NewCache.
//
// Each answer is one string key under the Store's prefix, "cache:" and
// the cache key as given (cache.Key makes it a hash), which expires when
// the answer may no longer be served (Put's keep, the cache's MaxStale).
// Redis's own memory limit (maxmemory, with an eviction policy such as
// allkeys-lru or volatile-lru) bounds the store as a whole. The value is
// the answer's status, header, body and stored time in a compact binary
// form, the body byte for byte. A value that does not decode (a foreign
// key, a later version's form) is a miss.
//
// A Put is one SET, a Get one script that reads the answer, or, when it is
// longer than 64 KiB, says how long, and then a second that reads it; each
// round trip is bounded by the Store's Timeout and one more millisecond
// for each 64 KiB carried. While Redis is away (see the package doc),
// nothing is kept or served: Get is a miss and Put fails at once, both
// with an error wrapping ErrUnavailable, and the calls go on as without a
// cache. The stored time is the storing replica's clock, and an answer's
// Age is read by the serving replica's: clocks that disagree move it.
type Cache struct {
	store    *Store
	maxEntry int
}

// NewCache returns a Cache on s.
func NewCache(s *Store, cfg CacheConfig) (*Cache, error) {
	if s == nil {
		return nil, errors.New("reboundredis: NewCache: the Store is nil")
	}
	if cfg.MaxEntryBytes < 0 {
		return nil, fmt.Errorf("reboundredis: negative CacheConfig.MaxEntryBytes (%d)", cfg.MaxEntryBytes)
	}
	maxEntry := cfg.MaxEntryBytes
	if maxEntry == 0 {
		maxEntry = DefaultMaxEntryBytes
	}
	return &Cache{store: s, maxEntry: maxEntry}, nil
}

// cacheKeys names the keys of cached answers under the Store's prefix.
const cacheKeys = "cache"

var (
	// cacheGet: KEYS[1]; ARGV the longest answer to return. Returns the
	// answer, its length if it is longer, or nil.
	cacheGet = redis.NewScript(`local n = redis.call('STRLEN', KEYS[1])
if n > tonumber(ARGV[1]) then return n end
return redis.call('GET', KEYS[1])`)
	// cacheSet: KEYS[1]; ARGV the answer, its keep in ms.
	cacheSet = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])`)
)

// Get returns the answer stored at key, if there is one that decodes.
func (c *Cache) Get(ctx context.Context, key string) (cache.Entry, bool, error) {
	k := c.store.key(cacheKeys, key)
	res, err := c.store.run(ctx, cacheGet, []string{k}, inlineRecord)
	if n, long := res.(int64); err == nil && long {
		if n > int64(c.maxEntry) {
			return cache.Entry{}, false, nil // kept by a replica that keeps more; too long to wait for
		}
		res, err = c.store.runFor(ctx, c.store.payloadTimeout(int(n)), cacheGet, []string{k}, n)
	}
	if errors.Is(err, redis.Nil) {
		return cache.Entry{}, false, nil
	}
	if err != nil {
		return cache.Entry{}, false, fmt.Errorf("reboundredis: reading a cached answer: %w", err)
	}
	switch v := res.(type) {
	case string:
		e, ok := decodeEntry(v)
		return e, ok, nil
	case int64:
		return cache.Entry{}, false, nil // replaced by a longer one between the reads
	}
	// Not the value itself, which is an answer and stays out of logs.
	return cache.Entry{}, false, c.store.noDecision(fmt.Errorf("reboundredis: an answer to a cache read that is neither a value nor a length (%T)", res))
}

// Put stores e at key for keep; a keep of zero or less keeps nothing.
func (c *Cache) Put(ctx context.Context, key string, e cache.Entry, keep time.Duration) error {
	n := entryLen(e)
	if n > c.maxEntry {
		return fmt.Errorf("reboundredis: %w (%d bytes, more than CacheConfig.MaxEntryBytes %d)", cache.ErrTooLarge, n, c.maxEntry)
	}
	if keep <= 0 {
		return nil
	}
	b := appendEntry(make([]byte, 0, n), e)
	if _, err := c.store.runFor(ctx, c.store.payloadTimeout(n), cacheSet, []string{c.store.key(cacheKeys, key)}, b, ms(keep)); err != nil {
		return fmt.Errorf("reboundredis: keeping an answer: %w", err)
	}
	return nil
}

// An answer as Redis keeps it: entryVersion, then as uvarints (varint for
// the seconds) the status, the stored time's Unix seconds and nanoseconds,
// the number of header names and, for each, its length and bytes, its
// number of values and each value's length and bytes; then the body, to
// the end.
const entryVersion = 1

// entryLen returns the length of e as Redis keeps it.
func entryLen(e cache.Entry) int {
	n := 1 + uvarintLen(uint64(e.Status)) + uvarintLen(zigzag(e.Stored.Unix())) +
		uvarintLen(uint64(e.Stored.Nanosecond())) + uvarintLen(uint64(len(e.Header)))
	for name, vs := range e.Header {
		n += uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(vs)))
		for _, v := range vs {
			n += uvarintLen(uint64(len(v))) + len(v)
		}
	}
	return n + len(e.Body)
}

// zigzag is x as binary.AppendVarint encodes it, before its uvarint.
func zigzag(x int64) uint64 { return uint64(x<<1) ^ uint64(x>>63) }

func uvarintLen(x uint64) int {
	n := 1
	for ; x >= 0x80; x >>= 7 {
		n++
	}
	return n
}

// appendEntry appends e, as Redis keeps it, to b.
func appendEntry(b []byte, e cache.Entry) []byte {
	b = append(b, entryVersion)
	b = binary.AppendUvarint(b, uint64(e.Status))
	b = binary.AppendVarint(b, e.Stored.Unix())
	b = binary.AppendUvarint(b, uint64(e.Stored.Nanosecond()))
	b = binary.AppendUvarint(b, uint64(len(e.Header)))
	for name, vs := range e.Header {
		b = binary.AppendUvarint(b, uint64(len(name)))
		b = append(b, name...)
		b = binary.AppendUvarint(b, uint64(len(vs)))
		for _, v := range vs {
			b = binary.AppendUvarint(b, uint64(len(v)))
			b = append(b, v...)
		}
	}
	return append(b, e.Body...)
}

// decodeEntry reads an answer as Redis keeps it; ok is false if s is not
// one. The header's strings share s; the body is a copy.
func decodeEntry(s string) (e cache.Entry, ok bool) {
	d := decoder{s: s}
	if d.byte() != entryVersion {
		return cache.Entry{}, false
	}
	status := d.uvarint()
	sec := d.varint()
	nsec := d.uvarint()
	names := d.uvarint()
	if status < 100 || status > 999 || nsec >= 1e9 || names > uint64(len(d.s)) {
		return cache.Entry{}, false
	}
	var h http.Header
	if names > 0 {
		h = make(http.Header, names)
	}
	for range names {
		name := d.string()
		vs := make([]string, min(d.uvarint(), uint64(len(d.s))))
		for i := range vs {
			vs[i] = d.string()
		}
		h[name] = vs
	}
	if d.bad {
		return cache.Entry{}, false
	}
	return cache.Entry{Status: int(status), Header: h, Body: []byte(d.s), Stored: time.Unix(sec, int64(nsec))}, true
}

// decoder reads an answer's fields off s; bad is set once one was not
// there, and every later field reads as zero.
type decoder struct {
	s   string
	bad bool
}

func (d *decoder) byte() byte {
	if d.bad || d.s == "" {
		d.bad = true
		return 0
	}
	b := d.s[0]
	d.s = d.s[1:]
	return b
}

func (d *decoder) uvarint() uint64 {
	var x uint64
	for shift := 0; shift < 64; shift += 7 {
		b := d.byte()
		if shift == 63 && b > 1 {
			break // past 64 bits
		}
		x |= uint64(b&0x7f) << shift
		if b < 0x80 {
			return x
		}
	}
	d.bad = true
	return 0
}

func (d *decoder) varint() int64 {
	u := d.uvarint()
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.s)) {
		d.bad = true
		return ""
	}
	v := d.s[:n]
	d.s = d.s[n:]
	return v
}
