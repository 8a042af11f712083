package chaos

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"hash"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/usage"
)

// The prompt cache's rules (see Prompt cache in the package doc).
const (
	// DefaultCacheTTL is how long a cached prefix lives after its last
	// use, for a Config that sets no CacheTTL: five minutes, as Anthropic
	// and OpenAI keep theirs.
	DefaultCacheTTL = 5 * time.Minute
	// MinCacheTokens is the shortest prefix the cache keeps, in the
	// server's tokens: 1024, the providers' minimum.
	MinCacheTokens = 1024
	// MaxCacheEntries is the most prefixes the cache keeps, of every key
	// and model together; beyond it the least recently used is forgotten
	// first. Each is a hash and a time, about 200 bytes with the cache's
	// bookkeeping: some 13 MB in all.
	MaxCacheEntries = 1 << 16
)

// A prefixID names a prefix of a prompt with the API key and model it
// was sent with: their SHA-256, so that the cache keeps neither a key nor
// a prompt.
type prefixID [sha256.Size]byte

// A prefix is a place in a prompt where the cache may keep it, with the
// tokens of the prompt up to there.
type prefix struct {
	id     prefixID
	tokens int
}

// prefixes returns the places req's prompt, sent with key for model, may
// be cached at, shortest first: after its system prompt and tools, and
// after each message. Their tokens are counted as inputTokens counts
// them, so the last one's are the prompt's.
func (req request) prefixes(key, model string) []prefix {
	system, turns := req.prompt()
	h := sha256.New()
	for _, field := range []string{key, model, compact(req.Tools), compact(req.ToolConfig), system} {
		writeField(h, field)
	}
	n := len(system)
	out := make([]prefix, 0, len(turns)+1)
	add := func() {
		var p prefix
		h.Sum(p.id[:0])
		p.tokens = tokens(min(n, req.size))
		out = append(out, p)
	}
	add()
	for _, tn := range turns {
		writeField(h, tn.role)
		writeField(h, tn.text)
		n += len(tn.text)
		add()
	}
	return out
}

// writeField writes s to h after its length, so that no two sequences of
// fields hash alike.
func writeField(h hash.Hash, s string) {
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
	h.Write([]byte(s))
}

// compact returns raw without its insignificant spaces, so that tools
// sent again, formatted another way, are the same prefix.
func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return b.String()
}

// promptCache is the prefixes written, least recently used first. Each
// lives the same time after its last use, so the least recently used is
// also the first to expire.
type promptCache struct {
	ttl time.Duration
	max int // the most prefixes kept: MaxCacheEntries, less in a test

	mu      sync.Mutex
	entries map[prefixID]*list.Element // of *cacheEntry, in order
	order   list.List
}

type cacheEntry struct {
	id      prefixID
	expires time.Time
}

func newPromptCache(ttl time.Duration) *promptCache {
	return &promptCache{ttl: ttl, max: MaxCacheEntries, entries: make(map[prefixID]*list.Element)}
}

// use reads from the cache, at now, the longest of ps it holds that is
// at least MinCacheTokens long, and writes every one of ps that long,
// refreshing those it holds. It returns the tokens read, and those
// written: the rest of the prompt, if the prompt is long enough to be
// cached at all.
func (pc *promptCache) use(ps []prefix, now time.Time) (read, written int) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for e := pc.order.Front(); e != nil && !now.Before(e.Value.(*cacheEntry).expires); e = pc.order.Front() {
		pc.remove(e)
	}
	for i := len(ps) - 1; i >= 0 && read == 0; i-- {
		if ps[i].tokens >= MinCacheTokens && pc.entries[ps[i].id] != nil {
			read = ps[i].tokens
		}
	}
	// Shortest first, so that the longest is the last to be forgotten.
	for _, p := range ps {
		if p.tokens >= MinCacheTokens {
			pc.touch(p.id, now)
		}
	}
	if whole := ps[len(ps)-1].tokens; whole >= MinCacheTokens {
		written = whole - read
	}
	return read, written
}

// touch writes id, or refreshes it, to live pc.ttl from now, forgetting
// the least recently used prefix if the cache is full.
func (pc *promptCache) touch(id prefixID, now time.Time) {
	expires := now.Add(pc.ttl)
	if e := pc.entries[id]; e != nil {
		e.Value.(*cacheEntry).expires = expires
		pc.order.MoveToBack(e)
		return
	}
	pc.entries[id] = pc.order.PushBack(&cacheEntry{id, expires})
	if len(pc.entries) > pc.max {
		pc.remove(pc.order.Front())
	}
}

func (pc *promptCache) remove(e *list.Element) {
	delete(pc.entries, e.Value.(*cacheEntry).id)
	pc.order.Remove(e)
}

// len returns how many prefixes the cache holds.
func (pc *promptCache) len() int {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	return len(pc.entries)
}

// clear forgets every prefix.
func (pc *promptCache) clear() {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	clear(pc.entries)
	pc.order.Init()
}

// useCache reads c's prompt from the server's prompt cache and writes it
// there, if the server keeps one and c's dialect reports usage, and sets
// what c is billed for it. A dialect that reports no cache write (OpenAI's,
// Gemini's) bills the tokens written as input, as those providers do.
func (c *call) useCache() {
	if c.srv.cache == nil || c.dialect == nil {
		return
	}
	read, written := c.srv.cache.use(c.req.prefixes(c.apiKey, c.tally.model), time.Now())
	c.cacheRead = read
	if c.dialect.CacheWrite != "" {
		c.cacheWrite = written
	}
}

// counts returns c's usage by how it is billed, with output tokens out.
func (c *call) counts(out int) usage.Counts {
	return usage.Counts{
		Input:      int64(c.input - c.cacheRead - c.cacheWrite),
		CacheRead:  int64(c.cacheRead),
		CacheWrite: int64(c.cacheWrite),
		Output:     int64(out),
	}
}

// usageObject returns c's usage, with output tokens out, as d reports it.
// omitZero leaves out a cache count that is zero, as Gemini's and
// Bedrock's APIs do.
func (c *call) usageObject(d *usage.Dialect, out int, omitZero bool) object {
	o := d.Object(c.counts(out))
	for _, p := range []string{d.CacheRead, d.CacheWrite} {
		if omitZero && o[p] == int64(0) {
			delete(o, p)
		}
	}
	return o
}
