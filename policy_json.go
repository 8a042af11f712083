package rebound

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"time"
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

// attemptsValue reads a count of attempts.
func attemptsValue(key string, v json.RawMessage) (int, error) {
	n, err := integer(key, "an integer", v, strconv.IntSize)
	if err == nil && n == 0 {
		err = policyErr(key, "must be at least 1 (got 0)")
	}
	return int(n), err
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

// ruleJSON is a Rule's wire form.
type ruleJSON struct {
	Status         int    `json:"status,omitempty"`
	Header         string `json:"header,omitempty"`
	HeaderContains string `json:"header_contains,omitempty"`
	Type           string `json:"type,omitempty"`
	Code           string `json:"code,omitempty"`
	Message        string `json:"message,omitempty"`
	Kind           Kind   `json:"kind"`
	WaitMS         *int64 `json:"wait_ms,omitempty"`
}

var ruleKeys = []string{"status", "header", "header_contains", "type", "code", "message", "kind", "wait_ms"}

// rulesJSON is rules' wire form.
func rulesJSON(rules []Rule) []ruleJSON {
	if len(rules) == 0 {
		return nil
	}
	out := make([]ruleJSON, len(rules))
	for i, r := range rules {
		out[i] = ruleJSON{Status: r.Status, Header: r.Header, HeaderContains: r.HeaderContains,
			Type: r.Type, Code: r.Code, Message: r.Message, Kind: r.Kind}
		switch {
		case r.Wait == NoDelay:
			out[i].WaitMS = ptr[int64](0)
		case r.Wait > 0:
			out[i].WaitMS = ms(r.Wait)
		}
	}
	return out
}

// rulesValue reads rules: an array of objects, each with a kind.
func rulesValue(v json.RawMessage) ([]Rule, error) {
	var raws []json.RawMessage
	if v[0] != '[' || json.Unmarshal(v, &raws) != nil {
		return nil, policyErr("rules", "want an array of rules, got %s", given(v))
	}
	rules := make([]Rule, len(raws))
	for i, raw := range raws {
		key := ruleKey(i)
		obj, err := jsonObject(key, "an object", raw)
		if err != nil {
			return nil, err
		}
		if err := knownKeys(key, obj, ruleKeys); err != nil {
			return nil, err
		}
		r := &rules[i]
		if v := obj["status"]; v != nil {
			n, err := integer(key+".status", "an HTTP status", v, 32)
			if err != nil {
				return nil, err
			}
			r.Status = int(n)
		}
		for _, f := range []struct {
			key string
			dst *string
		}{{"header", &r.Header}, {"header_contains", &r.HeaderContains}, {"type", &r.Type}, {"code", &r.Code}, {"message", &r.Message}} {
			if v := obj[f.key]; v != nil && (v[0] != '"' || json.Unmarshal(v, f.dst) != nil) {
				return nil, policyErr(key+"."+f.key, "want a string, got %s", given(v))
			}
		}
		v := obj["kind"]
		if v == nil {
			return nil, policyErr(key+".kind", "missing (want %s)", wantList(kindNames[:KindCanceled]))
		}
		k, err := enumValue(key+".kind", v, kindNames[:])
		if err != nil {
			// The same error, listing only the kinds a rule may give.
			_, err = enumValue(key+".kind", v, kindNames[:KindCanceled])
			return nil, err
		}
		r.Kind = Kind(k)
		if r.Wait, err = msValue(key+".wait_ms", obj["wait_ms"], NoDelay); err != nil {
			return nil, err
		}
	}
	return rules, nil
}
