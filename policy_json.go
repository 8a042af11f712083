package rebound

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
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
	}
	if len(p.PerKind) > 0 {
		j.PerKind = make(map[Kind]overrideJSON, len(p.PerKind))
		for k := range p.PerKind {
			kb := p.forKind(k)
			j.PerKind[k] = overrideJSON{MaxAttempts: &kb.maxAttempts, BaseDelayMS: ms(kb.base), MaxDelayMS: ms(kb.max)}
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a policy: snake_case keys, durations in integer
// milliseconds, an absent key meaning the default and an explicit 0
// meaning zero. Unknown keys are rejected, and so is any policy that
// Validate rejects. Fields without a JSON form keep their values, and so
// does everything when the input is null.
func (p *Policy) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		return nil // as encoding/json does: null changes nothing
	}
	var j policyJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("rebound: policy: %w", err)
	}
	q := *p
	q.MaxAttempts, q.Multiplier, q.Jitter, q.Shape, q.ServerWait, q.PerKind = 0, 0, 0, 0, 0, nil
	if j.MaxAttempts != nil {
		if *j.MaxAttempts == 0 {
			return policyErr("max_attempts", "must be at least 1 (got 0)")
		}
		q.MaxAttempts = *j.MaxAttempts
	}
	var err error
	set := func(key string, dst *time.Duration, v *int64, zero time.Duration) {
		if err == nil {
			*dst, err = fromMS(key, v, zero)
		}
	}
	set("base_delay_ms", &q.BaseDelay, j.BaseDelayMS, NoDelay)
	set("max_delay_ms", &q.MaxDelay, j.MaxDelayMS, NoDelay)
	set("wait_budget_ms", &q.WaitBudget, j.WaitBudgetMS, NoDelay)
	set("max_server_wait_ms", &q.MaxServerWait, j.MaxServerWaitMS, NoDelay)
	set("attempt_timeout_ms", &q.AttemptTimeout, j.AttemptTimeoutMS, 0)
	if j.Multiplier != nil {
		if *j.Multiplier < 1 {
			return policyErr("multiplier", "must be a finite number of at least 1 (got %v)", *j.Multiplier)
		}
		q.Multiplier = *j.Multiplier
	}
	if j.Jitter != nil {
		q.Jitter = *j.Jitter
	}
	if j.Shape != nil {
		q.Shape = *j.Shape
		q.Schedule = nil
	}
	if j.ServerWait != nil {
		q.ServerWait = *j.ServerWait
	}
	if len(j.PerKind) > 0 {
		q.PerKind = make(map[Kind]Override, len(j.PerKind))
		for k, o := range j.PerKind {
			var ov Override
			key := "per_kind." + k.String()
			if o.MaxAttempts != nil {
				if *o.MaxAttempts <= 0 {
					return policyErr(key+".max_attempts", "must be at least 1 (got %d)", *o.MaxAttempts)
				}
				ov.MaxAttempts = *o.MaxAttempts
			}
			set(key+".base_delay_ms", &ov.BaseDelay, o.BaseDelayMS, NoDelay)
			set(key+".max_delay_ms", &ov.MaxDelay, o.MaxDelayMS, NoDelay)
			q.PerKind[k] = ov
		}
	}
	if err != nil {
		return err
	}
	if err := q.Validate(); err != nil {
		return err
	}
	*p = q
	return nil
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
