package analyze

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/runes"
)

// Limits that keep memory constant whatever the input holds.
const (
	// MaxLineBytes is the longest line read; a longer one is malformed.
	MaxLineBytes = 1 << 20
	// DefaultMaxGroups is how many distinct groups are kept when
	// Options.MaxGroups is 0; calls of any further group go to "other".
	DefaultMaxGroups = 10000
	// DefaultMaxKeys is how many distinct runs, and as many tenants, are
	// kept when Options.MaxKeys is 0; the calls of any further run or
	// tenant are counted together.
	DefaultMaxKeys = 10000
	// MaxCodeBytes is how much of an error type or code, or of a run's or
	// tenant's name, is kept.
	MaxCodeBytes = 64
	// MaxAttempts is the most attempts a call may log; more is malformed.
	MaxAttempts = 1000000
	// MaxMalformedLines is how many malformed line numbers a File keeps.
	MaxMalformedLines = 5
	// MaxCost is the most US dollars a call may log as its cost, or as a
	// cap; more is malformed.
	MaxCost = 1e9
	// MaxPrice is the highest price, in US dollars per million tokens: a
	// dollar a token, thousands of times the dearest model's.
	MaxPrice = 1e6
)

// Those bounds keep every dollar figure finite: a call costs at most
// MaxCost, or MaxAttempts attempts of math.MaxInt64 tokens at MaxPrice,
// some 1e25 dollars, and even 2^63 such calls add up to less than 1e44,
// far below the largest float64.

// Options configure an Analyzer. The zero value prices nothing, keeps
// DefaultMaxGroups groups and DefaultMaxKeys runs and tenants, and knows
// no cap but those the log carries.
type Options struct {
	// PriceIn and PriceOut are US dollars per million input and output
	// tokens, used for calls that log tokens but no cost when Priced is
	// set. New takes a price above MaxPrice as MaxPrice, and a negative
	// or NaN one as 0.
	PriceIn, PriceOut float64
	Priced            bool
	// PriceCacheRead and PriceCacheWrite are US dollars per million input
	// tokens read from the provider's prompt cache and written into it,
	// with Priced; nil means PriceIn, so that the cache saves nothing
	// unless its prices are given. New bounds them as it does PriceIn.
	PriceCacheRead, PriceCacheWrite *float64
	// MaxGroups bounds the distinct error groups kept; 0 means
	// DefaultMaxGroups. Beyond it calls go to "other"; "ok" always has a
	// row.
	MaxGroups int
	// RunCapUSD and TenantCapUSD are the caps, in US dollars, of the runs
	// and tenants whose calls log none; nil means none. New takes a cap
	// above MaxCost as MaxCost, and a negative or NaN one as 0.
	RunCapUSD, TenantCapUSD *float64
	// MaxKeys bounds the distinct runs kept, and the distinct tenants; 0
	// means DefaultMaxKeys. Beyond it, the calls of runs (tenants) not yet
	// seen are counted together.
	MaxKeys int
}

// Analyzer aggregates calls read from any number of inputs. It keeps one
// counter set per group and no lines. It is not safe for concurrent use.
type Analyzer struct {
	opts   Options
	groups map[groupKey]*group
	// kinds caches the computed verdict of each (status, type, code).
	kinds map[baseKey]rebound.Kind
	files []File
	// runs and tenants are the calls' spend against their caps.
	runs, tenants ledger
	// cache is what the calls' tokens say of the provider's cache.
	cache cacheTally
	// answers counts the answers served from a response cache.
	answers answersTally
	// long holds a line longer than the reader's buffer; reused.
	long []byte
	br   *bufio.Reader
	dec  decoder
	rec  record
}

// New returns an Analyzer with options o.
func New(o Options) *Analyzer {
	if o.MaxGroups <= 0 {
		o.MaxGroups = DefaultMaxGroups
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = DefaultMaxKeys
	}
	o.PriceIn, o.PriceOut = price(o.PriceIn), price(o.PriceOut)
	for _, p := range []**float64{&o.PriceCacheRead, &o.PriceCacheWrite} {
		v := o.PriceIn
		if *p != nil {
			v = price(**p)
		}
		*p = &v
	}
	a := &Analyzer{opts: o, groups: make(map[groupKey]*group), kinds: make(map[baseKey]rebound.Kind)}
	a.runs.defaultCap, a.tenants.defaultCap = capFlag(o.RunCapUSD), capFlag(o.TenantCapUSD)
	return a
}

// price bounds p to [0, MaxPrice], NaN to 0.
func price(p float64) float64 {
	if !(p > 0) {
		return 0
	}
	return min(p, MaxPrice)
}

// File is what one input held.
type File struct {
	Name      string `json:"name"`
	Lines     int64  `json:"lines"`
	Calls     int64  `json:"calls"`
	Malformed int64  `json:"malformed"`
	Skipped   int64  `json:"skipped"`
	// MalformedLines are the numbers, from 1, of the first
	// MaxMalformedLines malformed lines.
	MalformedLines []int64 `json:"malformed_lines"`
}

// readerSize is the reader's buffer: a line longer than it is gathered
// into Analyzer.long.
const readerSize = 64 << 10

// Read reads the JSON lines of r, the input called name, into a's totals
// and returns what the input held. It stops at the first read error, or
// when ctx is done, returning what it read so far.
func (a *Analyzer) Read(ctx context.Context, name string, r io.Reader) (File, error) {
	f := File{Name: name, MalformedLines: []int64{}}
	defer func() { a.files = append(a.files, f) }()
	if a.br == nil {
		a.br = bufio.NewReaderSize(r, readerSize)
	} else {
		a.br.Reset(r)
	}
	defer a.br.Reset(nil)
	br := a.br
	for {
		if f.Lines&0xfff == 0 {
			if err := ctx.Err(); err != nil {
				return f, err
			}
		}
		line, err := br.ReadSlice('\n')
		tooLong := false
		if errors.Is(err, bufio.ErrBufferFull) {
			a.long = append(a.long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				if !tooLong && len(a.long)+len(line) > MaxLineBytes+2 {
					tooLong = true
				}
				if !tooLong {
					a.long = append(a.long, line...)
				}
			}
			line = a.long
		}
		if err != nil && err != io.EOF {
			return f, err
		}
		if len(line) == 0 && err == io.EOF {
			return f, nil
		}
		f.Lines++
		line = bytes.TrimSuffix(line, []byte{'\n'})
		line = bytes.TrimSuffix(line, []byte{'\r'})
		res := lineMalformed
		if !tooLong && len(line) <= MaxLineBytes {
			res = a.line(line)
		}
		switch res {
		case lineCall:
			f.Calls++
		case lineSkipped:
			f.Skipped++
		case lineMalformed:
			f.Malformed++
			if len(f.MalformedLines) < MaxMalformedLines {
				f.MalformedLines = append(f.MalformedLines, f.Lines)
			}
		}
		if err == io.EOF {
			return f, nil
		}
	}
}

// lineResult is what one line was.
type lineResult uint8

const (
	lineCall lineResult = iota
	lineSkipped
	lineMalformed
)

// record is the union of both schemas' keys that matter.
type record struct {
	Msg          string   `json:"msg"`
	Succeeded    optBool  `json:"succeeded"`
	Retried      optBool  `json:"retried"`
	Attempts     optInt   `json:"attempts"`
	Status       optInt   `json:"status"`
	ErrorType    string   `json:"error_type"`
	ErrorCode    string   `json:"error_code"`
	Kind         string   `json:"kind"`
	InputTokens  optInt   `json:"input_tokens"`
	OutputTokens optInt   `json:"output_tokens"`
	Cost         optFloat `json:"cost"`
	Run          string   `json:"run"`
	Tenant       string   `json:"tenant"`
	RunCap       optFloat `json:"run_cap_usd"`
	TenantCap    optFloat `json:"tenant_cap_usd"`
	Refused      refusal  `json:"reason"`
	// CostUSD and Outcome are rebound proxy's.
	CostUSD optFloat `json:"cost_usd"`
	Outcome string   `json:"outcome"`
	// CacheReadTokens and CacheWriteTokens are parts of InputTokens: read
	// from the provider's cache, and written into it.
	CacheReadTokens  optInt `json:"cache_read_tokens"`
	CacheWriteTokens optInt `json:"cache_write_tokens"`
	// Cache and SavedUSD are rebound proxy's response cache: "hit" or
	// "stale" for an answer it served, and what that answer did not cost.
	Cache    string   `json:"cache"`
	SavedUSD optFloat `json:"saved_usd"`
}

// call is one call, checked and with its defaults filled in.
type call struct {
	succeeded bool
	attempts  int64
	status    int
	errType   string
	errCode   string
	// kind is the logged kind plus one; 0 when none was logged.
	kind uint8
	// priced says cost is known.
	priced                 bool
	cost, wasted, retryFee float64
	// run and tenant name the call's run and tenant, "" for none; their
	// caps are the ones the call logged.
	run, tenant       string
	runCap, tenantCap optFloat
	// refused: a cap refused an attempt, and the call gave up.
	refused bool
	// input, cacheRead and cacheWrite are the input tokens the call
	// logged, and those of them read from the cache and written into it;
	// tokened says it logged input_tokens. saved is what the cache saved
	// it, known (savedKnown) with prices and tokens.
	input, cacheRead, cacheWrite int64
	tokened, savedKnown          bool
	saved                        float64
	// served is how the answer came from a response cache: servedHit or
	// servedStale; 0 for not. notCost is what it did not cost, logged
	// (notCostKnown).
	served       uint8
	notCost      float64
	notCostKnown bool
}

// How an answer came from a response cache (call.served).
const (
	servedHit = iota + 1
	servedStale
)

// line adds one line to a's totals.
func (a *Analyzer) line(b []byte) lineResult {
	b = b[skipSpace(b, 0):]
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return lineSkipped
	}
	if b[0] != '{' {
		return lineMalformed
	}
	rec := &a.rec
	*rec = record{}
	if err := a.dec.decode(b, rec); err != nil {
		return lineMalformed
	}
	switch {
	case rec.Msg == "rebound.call":
		if !rec.Succeeded.set {
			return lineMalformed
		}
	case rec.Msg == proxyRequest && rec.Kind == "mcp":
		return lineSkipped // a tool call, not a model's
	case rec.Msg == proxyRequest:
		if !rec.Status.set {
			return lineMalformed
		}
		proxyCall(rec)
	case rec.Msg != "":
		return lineSkipped
	case !rec.Succeeded.set:
		return lineSkipped
	}
	c, ok := a.check(rec)
	if !ok {
		return lineMalformed
	}
	a.add(&c)
	return lineCall
}

// proxyRequest is the message of rebound proxy's access log lines.
const proxyRequest = "request"

// proxyCall reads rec, a line of rebound proxy's access log, as a call:
// answered when its status is under 400, refused by a cap when its
// tenant's spend cap refused it, costing its cost_usd.
func proxyCall(rec *record) {
	rec.Kind = "" // "llm", the line's kind: no verdict's
	rec.Succeeded = optBool{true, rec.Status.v > 0 && rec.Status.v < 400}
	rec.Refused = refusal(rec.Outcome == proxySpendCap)
	if rec.CostUSD.set {
		rec.Cost = rec.CostUSD
	}
}

// proxySpendCap is the outcome of a request its tenant's spend cap
// refused.
const proxySpendCap = "tenant_spend_cap"

// check validates rec and fills in its defaults.
func (a *Analyzer) check(rec *record) (call, bool) {
	c := call{succeeded: rec.Succeeded.v, attempts: rec.Attempts.v}
	switch {
	case c.attempts < 0 || c.attempts > MaxAttempts,
		rec.Status.v < 0 || rec.Status.v > 999,
		rec.InputTokens.v < 0, rec.OutputTokens.v < 0, rec.CacheReadTokens.v < 0, rec.CacheWriteTokens.v < 0,
		// The cache's counts are parts of the input.
		rec.CacheReadTokens.v > rec.InputTokens.v, rec.CacheWriteTokens.v > rec.InputTokens.v-rec.CacheReadTokens.v,
		!dollars(rec.Cost), !dollars(rec.RunCap), !dollars(rec.TenantCap), !dollars(rec.CostUSD), !dollars(rec.SavedUSD):
		return c, false
	}
	if c.attempts == 0 {
		c.attempts = 1
		if rec.Retried.v {
			c.attempts = 2
		}
	}
	c.status = int(rec.Status.v)
	if c.succeeded && c.status < 400 {
		c.status = 0 // a success logged with its 2xx
	}
	c.errType, c.errCode = clip(rec.ErrorType), clip(rec.ErrorCode)
	c.run, c.tenant = clip(rec.Run), clip(rec.Tenant)
	c.runCap, c.tenantCap = rec.RunCap, rec.TenantCap
	c.refused = bool(rec.Refused) && !c.succeeded
	for k := rebound.KindTransient; rec.Kind != "" && k <= rebound.KindCanceled; k++ {
		if rec.Kind == k.String() {
			c.kind = uint8(k) + 1
			break
		}
	}
	switch rec.Cache {
	case "hit":
		c.served = servedHit
	case "stale":
		c.served = servedStale
	}
	c.notCost, c.notCostKnown = rec.SavedUSD.v, c.served != 0 && rec.SavedUSD.set
	c.input, c.cacheRead, c.cacheWrite, c.tokened = rec.InputTokens.v, rec.CacheReadTokens.v, rec.CacheWriteTokens.v, rec.InputTokens.set
	n := float64(c.attempts)
	// Every attempt pays for its input: what it read afresh at the input
	// price, and what the cache held at the cache's prices.
	o := &a.opts
	fresh := c.input - c.cacheRead - c.cacheWrite
	in := (float64(fresh)*o.PriceIn + float64(c.cacheRead)**o.PriceCacheRead + float64(c.cacheWrite)**o.PriceCacheWrite) / 1e6
	if o.Priced && c.tokened {
		// What the cache's tokens would have cost at the input price,
		// less what they cost.
		c.saved = (float64(c.cacheRead)*(o.PriceIn-*o.PriceCacheRead) + float64(c.cacheWrite)*(o.PriceIn-*o.PriceCacheWrite)) / 1e6 * n
		c.savedKnown = true
	}
	switch {
	case rec.Cost.set:
		c.priced, c.cost = true, rec.Cost.v
		c.retryFee = c.cost * (n - 1) / n
	case o.Priced && (rec.InputTokens.set || rec.OutputTokens.set):
		c.priced, c.cost, c.retryFee = true, in*n, in*(n-1)
		if c.succeeded {
			c.cost += float64(rec.OutputTokens.v) * o.PriceOut / 1e6
		}
	}
	c.wasted = c.cost
	if c.succeeded {
		c.wasted = c.retryFee
	}
	return c, true
}

// dollars reports whether o, if logged, is a dollar amount: from 0 to
// MaxCost.
func dollars(o optFloat) bool { return !o.set || o.v >= 0 && o.v <= MaxCost }

// clip cuts s to at most MaxCodeBytes, on a rune boundary, and replaces
// control characters with U+FFFD: a log may carry what a hostile provider
// put in its error type, and a report must not carry terminal escapes.
func clip(s string) string {
	if len(s) > MaxCodeBytes {
		s = strings.Clone(runes.Cut(s, MaxCodeBytes)) // not to keep the rest alive
	}
	if strings.IndexFunc(s, unicode.IsControl) >= 0 {
		s = strings.Map(func(r rune) rune {
			if unicode.IsControl(r) {
				return utf8.RuneError
			}
			return r
		}, s)
	}
	return s
}
