package rebound

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rebound-go/rebound/internal/runes"
)

// policyJSON is Policy's wire form. Pointers tell an absent key (the
// default) from an explicit 0 (zero).
type policyJSON struct {
	MaxAttempts      *int                  `json:"max_attempts,omitempty"`
	BaseDelayMS      *int64                `json:"base_delay_ms,omitempty"`
	MaxDelayMS       *int64                `json:"max_delay_ms,omitempty"`
	Multiplier       *float64              `json:"multiplier,omitempty"`
	Jitter           *Jitter               `json:"jitter,omitempty"`
	Shape            *Shape                `json:"shape,omitempty"`
	WaitBudgetMS     *int64                `json:"wait_budget_ms,omitempty"`
	MaxServerWaitMS  *int64                `json:"max_server_wait_ms,omitempty"`
	ServerWait       *ServerWait           `json:"server_wait,omitempty"`
	AttemptTimeoutMS *int64                `json:"attempt_timeout_ms,omitempty"`
	PerKind          map[Kind]overrideJSON `json:"per_kind,omitempty"`
	Rules            []ruleJSON            `json:"rules,omitempty"`
}

type overrideJSON struct {
	MaxAttempts *int   `json:"max_attempts,omitempty"`
	BaseDelayMS *int64 `json:"base_delay_ms,omitempty"`
	MaxDelayMS  *int64 `json:"max_delay_ms,omitempty"`
}

// MarshalJSON writes p's effective values, defaults resolved, so that
// reading the result back gives a Policy that behaves the same. Durations
// are written in whole milliseconds (a non-zero duration under 1 ms is
// written as 1). A Schedule, a Classifier, an Observer and a Rand have no
// JSON form; a custom shape is written as "custom", which UnmarshalJSON
// refuses rather than silently changing behaviour.
func (p Policy) MarshalJSON() ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b := p.resolved()
	j := policyJSON{
		MaxAttempts:      &b.maxAttempts,
		BaseDelayMS:      ms(b.base),
		MaxDelayMS:       ms(b.max),
		Multiplier:       ptr(p.multiplier()),
		Jitter:           &p.Jitter,
		Shape:            ptr(p.shape()),
		WaitBudgetMS:     ms(p.waitBudget()),
		MaxServerWaitMS:  ms(p.maxServerWait()),
		ServerWait:       &p.ServerWait,
		AttemptTimeoutMS: ms(p.AttemptTimeout),
		Rules:            rulesJSON(p.Rules),
	}
	// Every kind whose backoff is not the Policy's own is written, the
	// default overrides too: the JSON read back must behave the same
	// though every field in it is explicit.
	for k := range Kind(KindPermanent) {
		kb := p.forKind(k)
		if _, set := p.PerKind[k]; !set && kb == b {
			continue
		}
		if j.PerKind == nil {
			j.PerKind = map[Kind]overrideJSON{}
		}
		j.PerKind[k] = overrideJSON{MaxAttempts: &kb.maxAttempts, BaseDelayMS: ms(kb.base), MaxDelayMS: ms(kb.max)}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a policy: snake_case keys, durations in integer
// milliseconds, an absent key (or null) meaning the default and an
// explicit 0 meaning zero. Unknown keys are rejected, and so is any policy
// that Validate rejects. Fields without a JSON form keep their values, and
// so does everything when the input is null or on any error.
//
// Every error is a *PolicyError naming the key at fault, what was given
// and what is wanted, in one line. json.Unmarshal checks the syntax of its
// whole input before it calls UnmarshalJSON, and reports a syntax error as
// its own *json.SyntaxError; call UnmarshalJSON directly to have those in
// the same words, with the byte at which the input went wrong.
func (p *Policy) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil // as encoding/json does: null changes nothing
	}
	obj, err := jsonObject("", "a JSON object", data)
	if err != nil {
		return err
	}
	if err := knownKeys("", obj, policyKeys); err != nil {
		return err
	}
	q := *p
	q.MaxAttempts, q.Multiplier, q.Jitter, q.Shape, q.ServerWait, q.PerKind, q.Rules = 0, 0, 0, 0, 0, nil, nil
	if v := obj["max_attempts"]; v != nil {
		if q.MaxAttempts, err = attemptsValue("max_attempts", v); err != nil {
			return err
		}
	}
	for _, d := range []struct {
		key  string
		dst  *time.Duration
		zero time.Duration
	}{
		{"base_delay_ms", &q.BaseDelay, NoDelay},
		{"max_delay_ms", &q.MaxDelay, NoDelay},
		{"wait_budget_ms", &q.WaitBudget, NoDelay},
		{"max_server_wait_ms", &q.MaxServerWait, NoDelay},
		{"attempt_timeout_ms", &q.AttemptTimeout, 0},
	} {
		if *d.dst, err = msValue(d.key, obj[d.key], d.zero); err != nil {
			return err
		}
	}
	if v := obj["multiplier"]; v != nil {
		if q.Multiplier, err = multiplierValue(v); err != nil {
			return err
		}
	}
	if v := obj["jitter"]; v != nil {
		i, err := enumValue("jitter", v, jitterNames[:])
		if err != nil {
			return err
		}
		q.Jitter = Jitter(i)
	}
	if v := obj["shape"]; v != nil {
		i, err := enumValue("shape", v, shapeNames[:])
		if err != nil {
			return err
		}
		q.Shape, q.Schedule = Shape(i), nil
	}
	if v := obj["server_wait"]; v != nil {
		i, err := enumValue("server_wait", v, serverWaitNames[:])
		if err != nil {
			return err
		}
		q.ServerWait = ServerWait(i)
	}
	if v := obj["per_kind"]; v != nil {
		if q.PerKind, err = perKindValue(v); err != nil {
			return err
		}
	}
	if v := obj["rules"]; v != nil {
		if q.Rules, err = rulesValue(v); err != nil {
			return err
		}
	}
	if err := q.Validate(); err != nil {
		return err
	}
	*p = q
	return nil
}

// The keys of a policy and of an override, in the order errors list them.
var (
	policyKeys = []string{
		"max_attempts", "base_delay_ms", "max_delay_ms", "multiplier", "jitter", "shape",
		"wait_budget_ms", "max_server_wait_ms", "server_wait", "attempt_timeout_ms", "per_kind", "rules",
	}
	overrideKeys = []string{"max_attempts", "base_delay_ms", "max_delay_ms"}
)

// jsonObject decodes data, the value of key ("" for the policy itself),
// as an object. A null value, like an absent key, is left out of it, as
// encoding/json leaves a field alone for null. want says what it is.
func jsonObject(key, want string, data []byte) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	err := json.Unmarshal(data, &obj)
	var syntax *json.SyntaxError
	switch {
	case errors.As(err, &syntax):
		return nil, policyErr(key, "%s at byte %d", syntax.Error(), syntax.Offset)
	case err != nil:
		return nil, policyErr(key, "want %s, got %s", want, given(data))
	}
	for k, v := range obj {
		if string(v) == "null" {
			delete(obj, k)
		}
	}
	return obj, nil
}

// knownKeys returns an error for the first key of obj, the value of key,
// that is not one of keys. Keys are matched exactly: the wire form has one
// spelling.
func knownKeys(key string, obj map[string]json.RawMessage, keys []string) error {
	var unknown []string
	for k := range obj {
		if !slices.Contains(keys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	return policyErr(key, "unknown key %s (want %s)", quote(slices.Min(unknown)), wantList(keys))
}

// attemptsValue reads a count of attempts.
func attemptsValue(key string, v json.RawMessage) (int, error) {
	n, err := integer(key, "an integer", v, strconv.IntSize)
	if err == nil && n == 0 {
		err = policyErr(key, "must be at least 1 (got 0)")
	}
	return int(n), err
}

// msValue reads a duration in milliseconds, as fromMS says.
func msValue(key string, v json.RawMessage, zero time.Duration) (time.Duration, error) {
	if v == nil {
		return 0, nil
	}
	n, err := integer(key, "an integer number of milliseconds", v, 64)
	if err != nil {
		return 0, err
	}
	return fromMS(key, &n, zero)
}

// integer reads v as a JSON integer of bits bits.
func integer(key, want string, v json.RawMessage, bits int) (int64, error) {
	n, err := strconv.ParseInt(string(v), 10, bits)
	switch {
	case err == nil:
		return n, nil
	case errors.Is(err, strconv.ErrRange):
		return 0, policyErr(key, "want %s, got %s (out of range)", want, given(v))
	}
	return 0, policyErr(key, "want %s, got %s", want, given(v))
}

// multiplierValue reads the multiplier.
func multiplierValue(v json.RawMessage) (float64, error) {
	if !isNumber(v) {
		return 0, policyErr("multiplier", "want a number, got %s", given(v))
	}
	m, err := strconv.ParseFloat(string(v), 64)
	if err != nil || m < 1 {
		return 0, policyErr("multiplier", "must be a finite number of at least 1 (got %s)", given(v))
	}
	return m, nil
}

// enumValue reads the name of one of names and returns its index.
func enumValue(key string, v json.RawMessage, names []string) (int, error) {
	var s string
	if v[0] != '"' || json.Unmarshal(v, &s) != nil {
		return 0, policyErr(key, "want a string (%s), got %s", wantList(names), given(v))
	}
	i := slices.Index(names, s)
	if i < 0 {
		return 0, policyErr(key, "unknown value %s (want %s)", quote(s), wantList(names))
	}
	return i, nil
}

// perKindValue reads per_kind: overrides by kind. Validate then refuses
// the kinds that are never retried.
func perKindValue(v json.RawMessage) (map[Kind]Override, error) {
	obj, err := jsonObject("per_kind", "an object of kinds", v)
	if err != nil || len(obj) == 0 {
		return nil, err
	}
	kinds := slices.Sorted(maps.Keys(obj))
	per := make(map[Kind]Override, len(obj))
	for _, name := range kinds {
		k := slices.Index(kindNames[:], name)
		if k < 0 {
			return nil, policyErr("per_kind", "unknown kind %s (want %s)", quote(name), wantList(overridable()))
		}
		key := "per_kind." + name
		o, err := jsonObject(key, "an object", obj[name])
		if err != nil {
			return nil, err
		}
		if err := knownKeys(key, o, overrideKeys); err != nil {
			return nil, err
		}
		var ov Override
		if v := o["max_attempts"]; v != nil {
			n, err := integer(key+".max_attempts", "an integer", v, strconv.IntSize)
			if err != nil {
				return nil, err
			}
			if n <= 0 {
				return nil, policyErr(key+".max_attempts", "must be at least 1 (got %d)", n)
			}
			ov.MaxAttempts = int(n)
		}
		if ov.BaseDelay, err = msValue(key+".base_delay_ms", o["base_delay_ms"], NoDelay); err != nil {
			return nil, err
		}
		if ov.MaxDelay, err = msValue(key+".max_delay_ms", o["max_delay_ms"], NoDelay); err != nil {
			return nil, err
		}
		per[Kind(k)] = ov
	}
	return per, nil
}

// overridable returns the names of the kinds per_kind may override.
func overridable() []string {
	var names []string
	for k := range Kind(len(kindNames)) {
		if k.retryable() {
			names = append(names, k.String())
		}
	}
	return names
}

// isNumber reports whether the JSON value v is a number.
func isNumber(v json.RawMessage) bool { return v[0] == '-' || '0' <= v[0] && v[0] <= '9' }

// maxGiven is how much of a value an error shows.
const maxGiven = 32

// given shows the JSON value v in an error: as written, cut short if
// long, or "an object" or "an array". A JSON value other than those holds
// no line break.
func given(v []byte) string {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '{':
		return "an object"
	case v[0] == '[':
		return "an array"
	}
	return clip(string(v))
}

// quote shows a string from the input in an error, quoted and cut short if
// long.
func quote(s string) string { return clip(strconv.Quote(s)) }

// clip cuts s to maxGiven bytes, on a rune boundary, marking the cut.
func clip(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if cut := runes.Cut(s, maxGiven); cut != s {
		return cut + "…"
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// ms converts d to whole milliseconds, rounding to the nearest but keeping
// a non-zero duration non-zero.
func ms(d time.Duration) *int64 {
	n := d.Round(time.Millisecond).Milliseconds()
	if n == 0 && d > 0 {
		n = 1
	}
	return &n
}

// fromMS converts a JSON millisecond value: absent is 0 (the default), an
// explicit 0 is zero.
func fromMS(key string, v *int64, zero time.Duration) (time.Duration, error) {
	switch {
	case v == nil:
		return 0, nil
	case *v < 0:
		return 0, policyErr(key, "must not be negative (got %d)", *v)
	case *v == 0:
		return zero, nil
	case *v > math.MaxInt64/int64(time.Millisecond):
		return 0, policyErr(key, "%d ms is too large", *v)
	}
	return time.Duration(*v) * time.Millisecond, nil
}
