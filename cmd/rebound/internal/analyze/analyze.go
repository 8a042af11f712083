package analyze

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
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
}

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
	rec := &a.rec // not a local: decode's fallback would move it to the heap
	*rec = record{}
	if err := a.dec.decode(b, rec); err != nil {
		return lineMalformed
	}
	switch {
	case rec.Msg == "rebound.call":
		if !rec.Succeeded.set {
			return lineMalformed
		}
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

// check validates rec and fills in its defaults.
func (a *Analyzer) check(rec *record) (call, bool) {
	c := call{succeeded: rec.Succeeded.v, attempts: rec.Attempts.v}
	switch {
	case c.attempts < 0 || c.attempts > MaxAttempts,
		rec.Status.v < 0 || rec.Status.v > 999,
		rec.InputTokens.v < 0, rec.OutputTokens.v < 0,
		!dollars(rec.Cost), !dollars(rec.RunCap), !dollars(rec.TenantCap):
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
	n := float64(c.attempts)
	switch {
	case rec.Cost.set:
		c.priced, c.cost = true, rec.Cost.v
		c.retryFee = c.cost * (n - 1) / n
	case a.opts.Priced && (rec.InputTokens.set || rec.OutputTokens.set):
		in := float64(rec.InputTokens.v) * a.opts.PriceIn / 1e6
		c.priced, c.cost, c.retryFee = true, in*n, in*(n-1)
		if c.succeeded {
			c.cost += float64(rec.OutputTokens.v) * a.opts.PriceOut / 1e6
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

// baseKey is what a verdict is computed from.
type baseKey struct {
	status  int
	errType string
	errCode string
}

// groupKey names a group. class tells the "ok" and "other" rows apart
// from error rows; kind is the verdict kind plus one (0 for "ok").
type groupKey struct {
	baseKey
	kind  uint8
	class uint8
}

const (
	classError uint8 = iota
	classOK
	classOther
	classRefused // a spend cap refused it: no provider error
)

// group is a row's counters.
type group struct {
	key                         groupKey
	calls, attempts, retried    int64
	succeeded, succAfterRetry   int64
	wastedAttempts, pricedCalls int64
	pricedSucceeded             int64
	cost, wasted, retryFee      float64
}

// add counts c in its group.
func (a *Analyzer) add(c *call) {
	var k groupKey
	switch {
	case c.succeeded && c.status == 0 && c.errType == "" && c.errCode == "" && c.kind == 0:
		k.class = classOK
	case c.refused:
		k.class = classRefused
	default:
		k.baseKey = baseKey{c.status, c.errType, c.errCode}
		k.kind = c.kind
	}
	g := a.group(k)
	g.calls++
	g.attempts += c.attempts
	if c.attempts > 1 {
		g.retried++
	}
	if c.succeeded {
		g.succeeded++
		g.wastedAttempts += c.attempts - 1
		if c.attempts > 1 {
			g.succAfterRetry++
		}
	} else {
		g.wastedAttempts += c.attempts
	}
	if c.priced {
		g.pricedCalls++
		if c.succeeded {
			g.pricedSucceeded++
		}
		g.cost += c.cost
		g.wasted += c.wasted
		g.retryFee += c.retryFee
	}
	if c.run != "" || c.tenant != "" {
		a.runs.add(c.run, c, c.runCap, a.opts.MaxKeys)
		a.tenants.add(c.tenant, c, c.tenantCap, a.opts.MaxKeys)
	}
}

// group returns the group of k, the "other" group once there are
// MaxGroups others. An error's kind, if rebound did not log it, is computed
// once per (status, type, code): every group of a computed kind has its
// key in a.kinds, so a key missing from it when the groups are full
// can only go to "other", and is not classified at all.
func (a *Analyzer) group(k groupKey) *group {
	full := len(a.groups) >= a.opts.MaxGroups && k.class != classOK && k.class != classRefused // these always have a row
	if k.class == classError && k.kind == 0 {
		kind, ok := a.kinds[k.baseKey]
		switch {
		case ok:
		case full || len(a.kinds) >= a.opts.MaxGroups:
			k = groupKey{class: classOther}
		default:
			kind = Classify(k.status, k.errType, k.errCode)
			a.kinds[k.baseKey] = kind
		}
		if k.class == classError {
			k.kind = uint8(kind) + 1
		}
	}
	if g := a.groups[k]; g != nil {
		return g
	}
	if full {
		k = groupKey{class: classOther}
		if g := a.groups[k]; g != nil {
			return g
		}
	}
	g := &group{key: k}
	a.groups[k] = g
	return g
}

// Classify returns rebound's verdict kind on a failure with HTTP status
// status (0 for none) and a provider error body
// {"error":{"type":errType,"code":errCode}}.
func Classify(status int, errType, errCode string) rebound.Kind {
	var body struct {
		Error struct {
			Type string `json:"type,omitempty"`
			Code string `json:"code,omitempty"`
		} `json:"error"`
	}
	body.Error.Type, body.Error.Code = errType, errCode
	b, _ := json.Marshal(body)
	return rebound.ClassifyResponse(status, nil, b).Kind
}

// Recommendation says what to do about failures of kind k.
func Recommendation(k rebound.Kind) string {
	switch k {
	case rebound.KindTransient:
		return "retry with backoff and jitter"
	case rebound.KindRateLimited:
		return "retry with backoff, honour Retry-After"
	case rebound.KindOverloaded:
		return "retry; fall back on repeat"
	case rebound.KindQuotaExhausted:
		return "never retry; quota does not come back in seconds: fall back or alert"
	case rebound.KindContextOverflow:
		return "never retry; compact or fall back"
	case rebound.KindPermanent:
		return "never retry: fix the request"
	case rebound.KindCanceled:
		return "not a provider failure: check the caller's deadlines"
	}
	return ""
}

// Futile reports whether retrying a failure of kind k can never succeed.
func Futile(k rebound.Kind) bool {
	return k == rebound.KindPermanent || k == rebound.KindQuotaExhausted || k == rebound.KindContextOverflow
}

// Report is the analysis of everything read so far. "rebound help
// analyze" documents its JSON form.
type Report struct {
	Files     []File `json:"files"`
	Lines     int64  `json:"lines"`
	Calls     int64  `json:"calls"`
	Malformed int64  `json:"malformed"`
	Skipped   int64  `json:"skipped"`
	Totals    Totals `json:"totals"`
	Rows      []Row  `json:"rows"`
	// Runs and Tenants are the runs and tenants the calls named, those
	// that passed or came nearest their caps first; left out when no
	// call named one. OtherRuns and OtherTenants count the calls of
	// those past Options.MaxKeys; left out when there were none.
	Runs         []Spend     `json:"runs,omitempty"`
	Tenants      []Spend     `json:"tenants,omitempty"`
	OtherRuns    *OtherSpend `json:"other_runs,omitempty"`
	OtherTenants *OtherSpend `json:"other_tenants,omitempty"`
}

// Totals are the figures of all calls.
type Totals struct {
	Calls               int64    `json:"calls"`
	Succeeded           int64    `json:"succeeded"`
	SuccessRate         float64  `json:"success_rate"`
	Attempts            int64    `json:"attempts"`
	Retries             int64    `json:"retries"`
	CallsRetried        int64    `json:"calls_retried"`
	RetryRate           float64  `json:"retry_rate"`
	SucceededAfterRetry int64    `json:"succeeded_after_retry"`
	WastedAttempts      int64    `json:"wasted_attempts"`
	PricedCalls         int64    `json:"priced_calls"`
	CostUSD             *float64 `json:"cost_usd"`
	WastedUSD           *float64 `json:"wasted_usd"`
	RetryCostUSD        *float64 `json:"retry_cost_usd"`
	// CostPerSuccessUSD is CostUSD over the priced calls that succeeded.
	CostPerSuccessUSD  *float64 `json:"cost_per_success_usd"`
	FutileRetries      int64    `json:"futile_retries"`
	FutileRetryCostUSD *float64 `json:"futile_retry_cost_usd"`
}

// Row is one group of calls.
type Row struct {
	// Group names the row: "ok", "other", "400 context_length_exceeded",
	// "503", "transport error", ...
	Group     string `json:"group"`
	Status    int    `json:"status"`
	ErrorType string `json:"error_type,omitempty"`
	ErrorCode string `json:"error_code,omitempty"`
	// Kind is the verdict kind's name; empty for "ok" and "other".
	Kind                string   `json:"kind,omitempty"`
	Calls               int64    `json:"calls"`
	Attempts            int64    `json:"attempts"`
	Retries             int64    `json:"retries"`
	CallsRetried        int64    `json:"calls_retried"`
	Succeeded           int64    `json:"succeeded"`
	SucceededAfterRetry int64    `json:"succeeded_after_retry"`
	SuccessRate         float64  `json:"success_rate"`
	WastedAttempts      int64    `json:"wasted_attempts"`
	PricedCalls         int64    `json:"priced_calls"`
	CostUSD             *float64 `json:"cost_usd"`
	WastedUSD           *float64 `json:"wasted_usd"`
	RetryCostUSD        *float64 `json:"retry_cost_usd"`
	// Futile is set for a row whose kind can never succeed on a retry
	// and on which retries were spent.
	Futile         bool   `json:"futile"`
	Recommendation string `json:"recommendation"`
}

// Report returns the analysis of everything read so far.
func (a *Analyzer) Report() Report {
	r := Report{Files: slices.Clone(a.files), Rows: make([]Row, 0, len(a.groups))}
	if r.Files == nil {
		r.Files = []File{}
	}
	for _, f := range a.files {
		r.Lines += f.Lines
		r.Calls += f.Calls
		r.Malformed += f.Malformed
		r.Skipped += f.Skipped
	}
	t := &r.Totals
	var cost, wasted, retryFee, futileFee float64
	var futilePriced, pricedSucceeded int64
	for _, g := range a.groups {
		row := g.row()
		r.Rows = append(r.Rows, row)
		t.Calls += g.calls
		t.Succeeded += g.succeeded
		t.Attempts += g.attempts
		t.CallsRetried += g.retried
		t.SucceededAfterRetry += g.succAfterRetry
		t.WastedAttempts += g.wastedAttempts
		t.PricedCalls += g.pricedCalls
		pricedSucceeded += g.pricedSucceeded
		cost += g.cost
		wasted += g.wasted
		retryFee += g.retryFee
		if row.Futile {
			t.FutileRetries += row.Retries
			futileFee += g.retryFee
			futilePriced += g.pricedCalls
		}
	}
	t.Retries = t.Attempts - t.Calls
	t.SuccessRate = rate(t.Succeeded, t.Calls)
	t.RetryRate = rate(t.CallsRetried, t.Calls)
	if t.PricedCalls > 0 {
		t.CostUSD, t.WastedUSD, t.RetryCostUSD = usd(cost), usd(wasted), usd(retryFee)
		if pricedSucceeded > 0 {
			t.CostPerSuccessUSD = usd(cost / float64(pricedSucceeded))
		}
	}
	if futilePriced > 0 {
		t.FutileRetryCostUSD = usd(futileFee)
	}
	slices.SortFunc(r.Rows, func(x, y Row) int {
		return cmp.Or(
			cmp.Compare(deref(y.WastedUSD), deref(x.WastedUSD)),
			cmp.Compare(y.Calls, x.Calls),
			cmp.Compare(x.Group, y.Group),
			cmp.Compare(x.Kind, y.Kind),
			cmp.Compare(x.ErrorType, y.ErrorType),
			cmp.Compare(x.ErrorCode, y.ErrorCode))
	})
	r.Runs, r.OtherRuns = a.runs.report()
	r.Tenants, r.OtherTenants = a.tenants.report()
	return r
}

// row returns g's row.
func (g *group) row() Row {
	k := g.key
	r := Row{
		Status: k.status, ErrorType: k.errType, ErrorCode: k.errCode,
		Calls: g.calls, Attempts: g.attempts, Retries: g.attempts - g.calls,
		CallsRetried: g.retried, Succeeded: g.succeeded, SucceededAfterRetry: g.succAfterRetry,
		SuccessRate: rate(g.succeeded, g.calls), WastedAttempts: g.wastedAttempts,
		PricedCalls: g.pricedCalls,
	}
	if g.pricedCalls > 0 {
		r.CostUSD, r.WastedUSD, r.RetryCostUSD = usd(g.cost), usd(g.wasted), usd(g.retryFee)
	}
	switch k.class {
	case classOK:
		r.Group = "ok"
		return r
	case classOther:
		r.Group = "other"
		return r
	case classRefused:
		r.Group = "refused by a spend cap"
		r.Recommendation = "not a provider error: raise the cap or end the run sooner; retrying spends nothing and gets nothing"
		return r
	}
	kind := rebound.Kind(k.kind - 1)
	r.Kind = kind.String()
	r.Recommendation = Recommendation(kind)
	r.Futile = Futile(kind) && r.Retries > 0
	r.Group = groupName(k.status, k.errType, k.errCode, kind)
	return r
}

// groupName names an error row.
func groupName(status int, errType, errCode string, kind rebound.Kind) string {
	what := errCode
	if what == "" {
		what = errType
	}
	switch {
	case status != 0 && what != "":
		return strconv.Itoa(status) + " " + what
	case status != 0:
		return strconv.Itoa(status)
	case what != "":
		return what
	case kind == rebound.KindCanceled:
		return "canceled"
	}
	return "transport error"
}

func rate(n, of int64) float64 {
	if of == 0 {
		return 0
	}
	return round(float64(n)/float64(of), 1e6)
}

// usd rounds a dollar amount to a millionth of a dollar.
func usd(v float64) *float64 {
	v = round(v, 1e6)
	return &v
}

func round(v, unit float64) float64 { return math.Round(v*unit) / unit }

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}
