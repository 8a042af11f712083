package rebound

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestZeroPolicyDefaults(t *testing.T) {
	got, err := json.Marshal(Policy{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_attempts":3,"base_delay_ms":500,"max_delay_ms":10000,"multiplier":2,"jitter":"full",` +
		`"shape":"exponential","wait_budget_ms":30000,"max_server_wait_ms":60000,"server_wait":"honor","attempt_timeout_ms":0,` +
		`"per_kind":{"overloaded":{"max_attempts":2,"base_delay_ms":1000,"max_delay_ms":10000},` +
		`"rate_limited":{"max_attempts":5,"base_delay_ms":2000,"max_delay_ms":20000}}}`
	if string(got) != want {
		t.Errorf("zero policy marshals to\n%s\nwant\n%s", got, want)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Policy
		want string // substring of the error; "" means valid
	}{
		{"zero", Policy{}, ""},
		{"no delay everywhere", Policy{BaseDelay: NoDelay, MaxDelay: NoDelay, WaitBudget: NoDelay, MaxServerWait: NoDelay}, ""},
		{"negative attempts", Policy{MaxAttempts: -1}, "max_attempts: must not be negative"},
		{"negative base", Policy{BaseDelay: -2 * time.Second}, "base_delay_ms: must not be negative"},
		{"negative budget", Policy{WaitBudget: -time.Second}, "wait_budget_ms"},
		{"negative server wait", Policy{MaxServerWait: -time.Second}, "max_server_wait_ms"},
		{"negative attempt timeout", Policy{AttemptTimeout: -time.Second}, "attempt_timeout_ms"},
		{"multiplier below 1", Policy{Multiplier: 0.5}, "multiplier"},
		{"max below base", Policy{BaseDelay: time.Second, MaxDelay: 100 * time.Millisecond}, "max_delay_ms: 100 is below base_delay_ms 1000"},
		{"base above default max", Policy{BaseDelay: time.Minute}, "max_delay_ms: 10000 is below base_delay_ms 60000"},
		{"small max shrinks default base", Policy{MaxDelay: 100 * time.Millisecond}, ""},
		{"unknown jitter", Policy{Jitter: 9}, "jitter: unknown value 9"},
		{"unknown shape", Policy{Shape: 9}, "shape: unknown value 9"},
		{"custom without schedule", Policy{Shape: ShapeCustom}, "custom needs a Schedule"},
		{"unknown server wait", Policy{ServerWait: 7}, "server_wait"},
		{"override of permanent", Policy{PerKind: map[Kind]Override{KindPermanent: {MaxAttempts: 2}}}, "permanent is never retried"},
		{"override max below base", Policy{PerKind: map[Kind]Override{KindRateLimited: {BaseDelay: 2 * time.Second, MaxDelay: time.Second}}}, "per_kind.rate_limited.max_delay_ms"},
		{"override negative attempts", Policy{PerKind: map[Kind]Override{KindTransient: {MaxAttempts: -3}}}, "per_kind.transient.max_attempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("error is not one line: %q", err)
			}
		})
	}
}

// The zero Policy is the recommended one: more patience for rate limits,
// one quick retry for an overload; a setting of the Policy's own wins over
// the default for every kind.
func TestDefaultPerKind(t *testing.T) {
	for _, c := range []struct {
		name string
		p    Policy
		kind Kind
		want backoff
	}{
		{"zero, transient", Policy{}, KindTransient, backoff{3, 500 * time.Millisecond, 10 * time.Second}},
		{"zero, rate limited", Policy{}, KindRateLimited, backoff{5, 2 * time.Second, 20 * time.Second}},
		{"zero, overloaded", Policy{}, KindOverloaded, backoff{2, time.Second, 10 * time.Second}},
		{"no retries means none", Policy{MaxAttempts: 1}, KindRateLimited, backoff{1, 2 * time.Second, 20 * time.Second}},
		{"own base", Policy{BaseDelay: 100 * time.Millisecond}, KindOverloaded, backoff{2, 100 * time.Millisecond, 10 * time.Second}},
		{"own cap caps the default base", Policy{MaxDelay: 300 * time.Millisecond}, KindRateLimited, backoff{5, 300 * time.Millisecond, 300 * time.Millisecond}},
		{"immediate", Policy{MaxDelay: NoDelay}, KindRateLimited, backoff{5, 0, 0}},
		{"an entry replaces the default", Policy{PerKind: map[Kind]Override{KindRateLimited: {MaxAttempts: 7}}}, KindRateLimited, backoff{7, 500 * time.Millisecond, 10 * time.Second}},
	} {
		if got := c.p.forKind(c.kind); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
		if err := c.p.Validate(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func TestSmallMaxDelayShrinksDefaultBase(t *testing.T) {
	p := Policy{MaxDelay: 300 * time.Millisecond}
	if b := p.resolved(); b.base != 300*time.Millisecond || b.max != 300*time.Millisecond {
		t.Fatalf("base %v max %v, want both 300ms", b.base, b.max)
	}
}

func TestUnmarshalPolicy(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want func(p Policy) bool
		err  string
	}{
		{in: `{}`, want: func(p Policy) bool { return p.resolved() == backoff{3, 500 * time.Millisecond, 10 * time.Second} }},
		{in: `{"base_delay_ms": 0}`, want: func(p Policy) bool { return p.BaseDelay == NoDelay && p.resolved().base == 0 }},
		{in: `{"wait_budget_ms": 0}`, want: func(p Policy) bool { return p.waitBudget() == 0 }},
		{in: `{"max_delay_ms": 200}`, want: func(p Policy) bool { return p.resolved().base == 200*time.Millisecond }},
		{in: `{"jitter": "decorrelated", "shape": "linear", "server_wait": "clamp"}`, want: func(p Policy) bool {
			return p.Jitter == JitterDecorrelated && p.Shape == ShapeLinear && p.ServerWait == ServerWaitClamp
		}},
		{in: `{"per_kind": {"rate_limited": {"max_attempts": 6, "base_delay_ms": 2000}}}`, want: func(p Policy) bool {
			b := p.forKind(KindRateLimited)
			return b.maxAttempts == 6 && b.base == 2*time.Second && p.forKind(KindTransient).maxAttempts == 3
		}},
		{in: `{"attempt_timeout_ms": 1500}`, want: func(p Policy) bool { return p.AttemptTimeout == 1500*time.Millisecond }},
		{in: `{"max_attempts": 3, "retries": 2}`, err: `unknown key "retries"`},
		{in: `{"per_kind": {"transient": {"wait_ms": 1}}}`, err: `unknown key "wait_ms"`},
		{in: `{"per_kind": {"sometimes": {}}}`, err: `unknown kind "sometimes"`},
		{in: `{"per_kind": {"quota_exhausted": {"max_attempts": 2}}}`, err: `quota_exhausted is never retried`},
		{in: `{"jitter": "wobbly"}`, err: `jitter: unknown value "wobbly" (want full, none, equal or decorrelated)`},
		{in: `{"shape": "custom"}`, err: `custom needs a Schedule`},
		{in: `{"base_delay_ms": -5}`, err: `base_delay_ms: must not be negative (got -5)`},
		{in: `{"max_attempts": 0}`, err: `max_attempts: must be at least 1`},
		{in: `{"multiplier": 0.5}`, err: `multiplier`},
		{in: `{"base_delay_ms": 9223372036854775807}`, err: `too large`},
		{in: `{"base_delay_ms": 1000, "max_delay_ms": 10}`, err: `max_delay_ms: 10 is below base_delay_ms 1000`},
		{in: `{"max_attempts": "three"}`, err: `max_attempts: want an integer, got "three"`},
		{in: `[1,2]`, err: `rebound: policy`},
	} {
		var p Policy
		err := json.Unmarshal([]byte(tc.in), &p)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want one containing %q", tc.in, err, tc.err)
			} else if strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: error is not one line: %q", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !tc.want(p) {
			t.Errorf("%s: unexpected policy %+v", tc.in, p)
		}
	}
}

func TestUnmarshalKeepsGoOnlyFields(t *testing.T) {
	obs := ObserverFunc(func(Event) {})
	p := Policy{Observer: obs, Classifier: Classify}
	if err := json.Unmarshal([]byte(`{"max_attempts": 5}`), &p); err != nil {
		t.Fatal(err)
	}
	if p.Observer == nil || p.Classifier == nil || p.MaxAttempts != 5 {
		t.Fatalf("policy after unmarshal: %+v", p)
	}
}

func TestUnmarshalErrorLeavesPolicyUnchanged(t *testing.T) {
	p := Policy{MaxAttempts: 7}
	if err := json.Unmarshal([]byte(`{"max_attempts": 2, "jitter": "nope"}`), &p); err == nil {
		t.Fatal("no error")
	}
	if p.MaxAttempts != 7 {
		t.Fatalf("MaxAttempts = %d after a failed unmarshal, want 7", p.MaxAttempts)
	}
}

func TestMarshalCustomShapeIsRefusedOnTheWayBack(t *testing.T) {
	p := Policy{Schedule: func(int) time.Duration { return time.Second }}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"shape":"custom"`) {
		t.Fatalf("marshalled %s, want shape custom", b)
	}
	var q Policy
	if err := json.Unmarshal(b, &q); err == nil || !strings.Contains(err.Error(), "Schedule") {
		t.Fatalf("unmarshal of a custom shape: %v, want an error naming Schedule", err)
	}
}

func TestMarshalInvalidPolicyFails(t *testing.T) {
	if _, err := json.Marshal(Policy{MaxAttempts: -1}); err == nil {
		t.Fatal("marshalled an invalid policy")
	}
}

func TestMarshalSubMillisecondStaysNonZero(t *testing.T) {
	b, err := json.Marshal(Policy{BaseDelay: 300 * time.Microsecond, MaxDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"base_delay_ms":1,`) {
		t.Fatalf("marshalled %s, want base_delay_ms 1", b)
	}
}

func TestUnmarshalNullChangesNothing(t *testing.T) {
	p := Policy{MaxAttempts: 7, BaseDelay: time.Second}
	if err := json.Unmarshal([]byte(` null `), &p); err != nil || p.MaxAttempts != 7 || p.BaseDelay != time.Second {
		t.Fatalf("%+v %v", p, err)
	}
}

// TestPolicyJSONErrors checks every way reading a policy can fail: each
// error is one line that names the key, what was given and what is wanted,
// in rebound's words only.
func TestPolicyJSONErrors(t *testing.T) {
	const kinds = "(want transient, rate_limited or overloaded)"
	const keys = "(want max_attempts, base_delay_ms, max_delay_ms, multiplier, jitter, shape, wait_budget_ms, " +
		"max_server_wait_ms, server_wait, attempt_timeout_ms, per_kind or rules)"
	for _, c := range []struct {
		in, key, want string
	}{
		// Syntax, and what follows the object.
		{`{"max_attempts":3`, "", "unexpected end of JSON input at byte 17"},
		{``, "", "unexpected end of JSON input at byte 0"},
		{`{"max_attempts":3,}`, "", "invalid character '}' looking for beginning of object key string at byte 19"},
		{`{"max_attempts":tru}`, "", "invalid character '}' in literal true (expecting 'e') at byte 20"},
		{`{"max_attempts":3} x`, "", "invalid character 'x' after top-level value at byte 20"},
		{`{"max_attempts":3}{}`, "", "invalid character '{' after top-level value at byte 19"},
		// Not an object.
		{`[1,2]`, "", "want a JSON object, got an array"},
		{`"fast"`, "", `want a JSON object, got "fast"`},
		{`3`, "", "want a JSON object, got 3"},
		{`true`, "", "want a JSON object, got true"},
		// Keys.
		{`{"retries":2}`, "", `unknown key "retries" ` + keys},
		{`{"Max_Attempts":3}`, "", `unknown key "Max_Attempts" ` + keys},
		{`{"b":1,"a":2}`, "", `unknown key "a" ` + keys},
		{"{\"line\\nbreak\":1}", "", `unknown key "line\nbreak" ` + keys},
		// Types.
		{`{"max_attempts":"3"}`, "max_attempts", `want an integer, got "3"`},
		{`{"max_attempts":3.5}`, "max_attempts", "want an integer, got 3.5"},
		{`{"max_attempts":1e3}`, "max_attempts", "want an integer, got 1e3"},
		{`{"max_attempts":99999999999999999999}`, "max_attempts", "want an integer, got 99999999999999999999 (out of range)"},
		{`{"max_attempts":true}`, "max_attempts", "want an integer, got true"},
		{`{"max_attempts":[3]}`, "max_attempts", "want an integer, got an array"},
		{`{"base_delay_ms":"100ms"}`, "base_delay_ms", `want an integer number of milliseconds, got "100ms"`},
		{`{"wait_budget_ms":1.5}`, "wait_budget_ms", "want an integer number of milliseconds, got 1.5"},
		{`{"attempt_timeout_ms":{}}`, "attempt_timeout_ms", "want an integer number of milliseconds, got an object"},
		{`{"multiplier":"2"}`, "multiplier", `want a number, got "2"`},
		{`{"multiplier":1e999}`, "multiplier", "must be a finite number of at least 1 (got 1e999)"},
		{`{"jitter":3}`, "jitter", "want a string (full, none, equal or decorrelated), got 3"},
		{`{"shape":false}`, "shape", "want a string (exponential, linear, constant or custom), got false"},
		{`{"server_wait":["honor"]}`, "server_wait", "want a string (honor, clamp or ignore), got an array"},
		{`{"max_attempts":"` + strings.Repeat("9", 100) + `"}`, "max_attempts", `want an integer, got "` + strings.Repeat("9", 31) + `…`},
		// Enumerations.
		{`{"jitter":"fulll"}`, "jitter", `unknown value "fulll" (want full, none, equal or decorrelated)`},
		{`{"shape":"Linear"}`, "shape", `unknown value "Linear" (want exponential, linear, constant or custom)`},
		{`{"server_wait":"wait"}`, "server_wait", `unknown value "wait" (want honor, clamp or ignore)`},
		// per_kind.
		{`{"per_kind":[1]}`, "per_kind", "want an object of kinds, got an array"},
		{`{"per_kind":{"sometimes":{}}}`, "per_kind", `unknown kind "sometimes" ` + kinds},
		{`{"per_kind":{"":{}}}`, "per_kind", `unknown kind "" ` + kinds},
		{`{"per_kind":{"transient":3}}`, "per_kind.transient", "want an object, got 3"},
		{`{"per_kind":{"transient":{"wait_ms":1}}}`, "per_kind.transient", `unknown key "wait_ms" (want max_attempts, base_delay_ms or max_delay_ms)`},
		{`{"per_kind":{"transient":{"max_attempts":"x"}}}`, "per_kind.transient.max_attempts", `want an integer, got "x"`},
		{`{"per_kind":{"rate_limited":{"base_delay_ms":-1}}}`, "per_kind.rate_limited.base_delay_ms", "must not be negative (got -1)"},
		{`{"per_kind":{"permanent":{}}}`, "per_kind", "permanent is never retried and cannot be overridden"},
		// Values.
		{`{"max_attempts":0}`, "max_attempts", "must be at least 1 (got 0)"},
		{`{"base_delay_ms":9223372036854775807}`, "base_delay_ms", "9223372036854775807 ms is too large"},
	} {
		var p Policy
		err := p.UnmarshalJSON([]byte(c.in))
		var perr *PolicyError
		if !errors.As(err, &perr) {
			t.Errorf("%s: error %v (%T), want a *PolicyError", c.in, err, err)
			continue
		}
		want := "rebound: policy: " + c.want
		if c.key != "" {
			want = "rebound: policy: " + c.key + ": " + c.want
		}
		if err.Error() != want || perr.Key != c.key {
			t.Errorf("%s:\n got %q (key %q)\nwant %q (key %q)", c.in, err, perr.Key, want, c.key)
		}
		// Through encoding/json, which checks the syntax first, every
		// error but a syntax error is the same.
		var q Policy
		if err := json.Unmarshal([]byte(c.in), &q); err == nil {
			t.Errorf("%s: json.Unmarshal accepted it", c.in)
		} else if _, syntax := err.(*json.SyntaxError); !syntax && err.Error() != want {
			t.Errorf("%s: json.Unmarshal: %v, want %q", c.in, err, want)
		}
	}
}

// FuzzPolicyJSONErrors: reading any bytes as a policy either succeeds or
// fails with a *PolicyError of one line of valid UTF-8 in rebound's words.
func FuzzPolicyJSONErrors(f *testing.F) {
	f.Add([]byte(`{"max_attempts":"3"}`))
	f.Add([]byte(`{"per_kind":{"transient":{"max_attempts":[1]}}}`))
	f.Add([]byte(`{"jitter":"ful\nl"}`))
	f.Add([]byte(`{"multiplier":1e999} x`))
	f.Add([]byte("{\"\xff\":1}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Policy
		err := p.UnmarshalJSON(data)
		if err == nil {
			return
		}
		var perr *PolicyError
		msg := err.Error()
		switch {
		case !errors.As(err, &perr):
			t.Fatalf("%q: %v (%T), want a *PolicyError", data, err, err)
		case strings.ContainsAny(msg, "\r\n") || !utf8.ValidString(msg):
			t.Fatalf("%q: error is not one line of text: %q", data, msg)
		case !strings.HasPrefix(msg, "rebound: policy: ") || strings.HasPrefix(msg, "rebound: policy: rebound:") ||
			strings.HasPrefix(msg, "rebound: policy: json:") || strings.Contains(msg, "Go struct") || strings.Contains(msg, "Go value"):
			t.Fatalf("%q: error not in rebound's words: %q", data, msg)
		}
	})
}
