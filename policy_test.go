package rebound

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestZeroPolicyDefaults(t *testing.T) {
	got, err := json.Marshal(Policy{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"max_attempts":3,"base_delay_ms":500,"max_delay_ms":30000,"multiplier":2,"jitter":"full",` +
		`"shape":"exponential","wait_budget_ms":30000,"max_server_wait_ms":60000,"server_wait":"honor","attempt_timeout_ms":0}`
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
		{"base above default max", Policy{BaseDelay: time.Minute}, "max_delay_ms: 30000 is below base_delay_ms 60000"},
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
		{in: `{}`, want: func(p Policy) bool { return p.resolved() == backoff{3, 500 * time.Millisecond, 30 * time.Second} }},
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
		{in: `{"max_attempts": 3, "retries": 2}`, err: `unknown field "retries"`},
		{in: `{"per_kind": {"transient": {"wait_ms": 1}}}`, err: `unknown field "wait_ms"`},
		{in: `{"per_kind": {"sometimes": {}}}`, err: `unknown kind "sometimes"`},
		{in: `{"per_kind": {"quota_exhausted": {"max_attempts": 2}}}`, err: `quota_exhausted is never retried`},
		{in: `{"jitter": "wobbly"}`, err: `unknown jitter "wobbly" (want full, none, equal, decorrelated)`},
		{in: `{"shape": "custom"}`, err: `custom needs a Schedule`},
		{in: `{"base_delay_ms": -5}`, err: `base_delay_ms: must not be negative (got -5)`},
		{in: `{"max_attempts": 0}`, err: `max_attempts: must be at least 1`},
		{in: `{"multiplier": 0.5}`, err: `multiplier`},
		{in: `{"base_delay_ms": 9223372036854775807}`, err: `too large`},
		{in: `{"base_delay_ms": 1000, "max_delay_ms": 10}`, err: `max_delay_ms: 10 is below base_delay_ms 1000`},
		{in: `{"max_attempts": "three"}`, err: `cannot unmarshal string`},
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
