package reboundotel

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/internal/runes"
)

// Attribute keys. error.type, http.response.status_code and
// http.request.resend_count are OpenTelemetry's semantic conventions.
const (
	keyTarget       = attribute.Key("rebound.target")
	keyOutcome      = attribute.Key("rebound.outcome")
	keyKind         = attribute.Key("rebound.verdict.kind")
	keyReason       = attribute.Key("rebound.stop_reason")
	keyAttempt      = attribute.Key("rebound.attempt")
	keyAttempts     = attribute.Key("rebound.attempts")
	keyWait         = attribute.Key("rebound.wait.duration")
	keyServerWait   = attribute.Key("rebound.server_wait.duration")
	keyWaited       = attribute.Key("rebound.waited.duration")
	keyErrorType    = attribute.Key("error.type")
	keyStatusCode   = attribute.Key("http.response.status_code")
	keyResendCount  = attribute.Key("http.request.resend_count")
	keyProviderType = attribute.Key("rebound.error.type")
	keyProviderCode = attribute.Key("rebound.error.code")
	keyBreakerName  = attribute.Key("rebound.breaker.name")
	keyBreakerState = attribute.Key("rebound.breaker.state")
	keyTokenType    = attribute.Key("gen_ai.token.type")
	keyCache        = attribute.Key("rebound.cache")
)

const codeError = codes.Error

var (
	outcomeSuccess = keyOutcome.String("success")
	outcomeFailure = keyOutcome.String("failure")
	cacheHit       = keyCache.String("hit")
	cacheStale     = keyCache.String("stale")
)

// kindValues holds rebound.verdict.kind for every Kind (see kindIndex);
// reasonValues holds rebound.stop_reason for every StopReason, both in
// snake_case ("rate_limited", "attempts_exhausted").
var (
	kindValues   [8]attribute.KeyValue
	reasonValues [256]attribute.KeyValue
)

func init() {
	for i := range kindValues {
		kindValues[i] = keyKind.String(slug(rebound.Kind(i).String()))
	}
	for i := range reasonValues {
		reasonValues[i] = keyReason.String(slug(rebound.StopReason(i).String()))
	}
}

// Token types, the values of gen_ai.token.type: the GenAI conventions
// define input and output; cache_read and cache_write are rebound's, in
// their spelling, for the parts of the input read from the provider's
// prompt cache and written into it.
const (
	tokenInput uint8 = iota
	tokenOutput
	tokenCacheRead
	tokenCacheWrite
	tokenTypes
)

var tokenTypeValues = [tokenTypes]attribute.KeyValue{
	keyTokenType.String("input"), keyTokenType.String("output"),
	keyTokenType.String("cache_read"), keyTokenType.String("cache_write"),
}

// kindIndex returns k's index in kindValues; the last entry stands for
// every kind rebound does not name.
func kindIndex(k rebound.Kind) int { return min(int(k), len(kindValues)-1) }

// slug writes a name in snake_case: "side effects, not retried" becomes
// "side_effects_not_retried".
func slug(s string) string {
	return strings.Join(strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9')
	}), "_")
}

// Instruments whose attribute sets are cached.
const (
	instAttempts uint8 = iota // a: 0 success, 1 failure; b: kind+1, or 0
	instRetries               // a: kind
	instGiveUps               // a: reason; b: kind+1, or 0
	instWaits                 // a: kind
	instCalls                 // a: 0 success, 1 failure
	instBudget
	instHedges
	instTokens // a: token type
)

type setKey struct {
	target string
	inst   uint8
	a, b   uint8
}

// Slots of a targetAttrs, one per instrument and attribute values, for
// the values rebound has names for (stop reasons up to maxReason).
const (
	kinds       = len(kindValues)
	maxReason   = 15
	slotRetries = 2 * (kinds + 1)
	slotWaits   = slotRetries + kinds
	slotCalls   = slotWaits + kinds
	slotBudget  = slotCalls + 2
	slotGiveUps = slotBudget + 1
	slotHedges  = slotGiveUps + (maxReason+1)*(kinds+1)
	slotTokens  = slotHedges + 1
	slots       = slotTokens + int(tokenTypes)
)

// slot returns the slot of an instrument's attribute values, or -1.
func slot(inst, a, b uint8) int {
	switch {
	case int(a) >= kinds+1 && inst != instGiveUps, int(b) > kinds:
		return -1
	case inst == instAttempts:
		return int(a)*(kinds+1) + int(b)
	case inst == instRetries:
		return slotRetries + int(a)
	case inst == instWaits:
		return slotWaits + int(a)
	case inst == instCalls:
		return slotCalls + int(a)
	case inst == instBudget:
		return slotBudget
	case inst == instHedges:
		return slotHedges
	case inst == instTokens && a < tokenTypes:
		return slotTokens + int(a)
	case inst == instGiveUps && a <= maxReason:
		return slotGiveUps + int(a)*(kinds+1) + int(b)
	}
	return -1
}

// targetAttrs holds what is built once per target: the options that start
// a call span, and the measurement options of each attribute set.
type targetAttrs struct {
	target string
	start  []trace.SpanStartOption
	slots  [slots]atomic.Pointer[measure]
}

// measure holds the options of a measurement with one attribute set, as
// slices ready to be passed on without allocating.
type measure struct {
	add []metric.AddOption
	rec []metric.RecordOption
}

var startClient = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}

// attrsOf returns target's attributes, built once for each of the
// lru.DefaultSize targets measured most recently.
func (o *Observer) attrsOf(target string) *targetAttrs {
	return o.targets.Get(target, func() *targetAttrs {
		ta := &targetAttrs{target: target, start: startClient}
		if target != "" {
			// The target, for samplers to see.
			ta.start = []trace.SpanStartOption{startClient[0], trace.WithAttributes(keyTarget.String(target))}
		}
		return ta
	})
}

// measure returns the measurement options of an instrument's attributes.
func (ta *targetAttrs) measure(inst, a, b uint8) *measure {
	i := slot(inst, a, b)
	if i >= 0 {
		if m := ta.slots[i].Load(); m != nil {
			return m
		}
	}
	opt := metric.WithAttributeSet(buildSet(setKey{target: ta.target, inst: inst, a: a, b: b}))
	m := &measure{add: []metric.AddOption{opt}, rec: []metric.RecordOption{opt}}
	if i >= 0 {
		ta.slots[i].Store(m)
	}
	return m
}

func buildSet(k setKey) attribute.Set {
	kv := make([]attribute.KeyValue, 1, 3)
	kv[0] = keyTarget.String(k.target)
	switch k.inst {
	case instAttempts, instCalls:
		if k.a == 0 {
			kv = append(kv, outcomeSuccess)
		} else {
			kv = append(kv, outcomeFailure)
		}
		if k.inst == instAttempts && k.b > 0 {
			kv = append(kv, kindValues[kindIndex(rebound.Kind(k.b-1))])
		}
	case instRetries, instWaits:
		kv = append(kv, kindValues[kindIndex(rebound.Kind(k.a))])
	case instTokens:
		kv = append(kv, tokenTypeValues[min(k.a, tokenTypes-1)])
	case instGiveUps:
		kv = append(kv, reasonValues[k.a])
		if k.b > 0 {
			kv = append(kv, kindValues[kindIndex(rebound.Kind(k.b-1))])
		}
	}
	return attribute.NewSet(kv...)
}

// maxMessage bounds an error message in a span status; maxCode bounds a
// provider's error type or code.
const (
	maxMessage = 200
	maxCode    = 64
)

// description is what may be recorded of an error.
type description struct {
	status   string // the span status: a bounded message or the Go type
	errType  string // error.type: the HTTP status code, else the Go type
	code     int    // the HTTP status, or 0
	provType string // rebound.ErrorCode's type and code, bounded
	provCode string
}

func (d *description) append(attrs []attribute.KeyValue) []attribute.KeyValue {
	attrs = append(attrs, keyErrorType.String(d.errType))
	if d.code != 0 {
		attrs = append(attrs, keyStatusCode.Int(d.code))
	}
	if d.provType != "" {
		attrs = append(attrs, keyProviderType.String(d.provType))
	}
	if d.provCode != "" {
		attrs = append(attrs, keyProviderCode.String(d.provCode))
	}
	return attrs
}

// reboundPath is the import path of rebound's root package.
var reboundPath = reflect.TypeFor[rebound.Policy]().PkgPath()

// describe says what may be recorded of err: its HTTP status, its
// provider's error type and code, its Go type and, if err is one of
// rebound's own errors, its message, bounded.
func describe(err error, omitMessage bool) description {
	var d description
	var he *rebound.HTTPError
	if errors.As(err, &he) {
		d.code = he.StatusCode
	}
	t, c := rebound.ErrorCode(err)
	d.provType, d.provCode = bound(t, maxCode), bound(c, maxCode)

	// Rebound's wrappers (Permanent, Retryable, GiveUpError and
	// Transport's scrubbing wrapper) say nothing of their own: look
	// through them for the error's type.
	inner := unwrapRebound(err)
	d.errType = fmt.Sprintf("%T", inner)
	if d.code != 0 {
		d.errType = strconv.Itoa(d.code)
	}
	d.status = fmt.Sprintf("%T", inner)
	if !omitMessage {
		if msg, ok := ownMessage(err); ok {
			d.status = bound(msg, maxMessage)
		}
	}
	return d
}

// unwrapRebound looks through rebound's own wrapping errors.
func unwrapRebound(err error) error {
	for {
		if g, ok := err.(*rebound.GiveUpError); ok && g.Err != nil {
			err = g.Err
			continue
		}
		if !fromRebound(err) {
			return err
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok || u.Unwrap() == nil {
			return err
		}
		err = u.Unwrap()
	}
}

// ownMessage returns err's message if err is one of rebound's errors whose
// messages hold nothing of the caller's: the message of a wrapper that
// repeats the error it wraps is only taken when that error is one of them.
func ownMessage(err error) (string, bool) {
	for {
		switch e := err.(type) {
		case *rebound.GiveUpError:
			if e.Err == nil {
				return "", false
			}
			err = e.Err
			continue
		case *breaker.OpenError:
			return e.Error(), true
		}
		if err == nil || !fromRebound(err) {
			return "", false
		}
		// A mark (Permanent, Retryable) says nothing of its own: its
		// message is the error it wraps, which is looked at instead.
		if u, ok := err.(interface{ Unwrap() error }); ok && u.Unwrap() != nil && err.Error() == u.Unwrap().Error() {
			err = u.Unwrap()
			continue
		}
		return err.Error(), true
	}
}

// fromRebound reports whether err's type is declared in rebound's root
// package.
func fromRebound(err error) bool {
	t := reflect.TypeOf(err)
	if t == nil {
		return false
	}
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() == reboundPath
}

// bound cuts s to at most n bytes, on a rune boundary, marking a cut with
// "…" (within the n bytes).
func bound(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return runes.Cut(s, n-len("…")) + "…"
}
