package rebound

import (
	"encoding/json"
	"math/rand/v2"
	"testing"
	"time"
)

// waits drives a fresh loop through n transient failures and returns the
// waits it allowed.
func waits(p Policy, n int) []time.Duration {
	l := newLoop(p, time.Time{}, false)
	var out []time.Duration
	for range n {
		d := l.next(Verdict{}, time.Time{}, false)
		if !d.Retry {
			break
		}
		out = append(out, d.Wait)
	}
	return out
}

func equalDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func millis(n ...int) []time.Duration {
	out := make([]time.Duration, len(n))
	for i, v := range n {
		out[i] = time.Duration(v) * time.Millisecond
	}
	return out
}

func TestShapes(t *testing.T) {
	base := Policy{MaxAttempts: 7, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second, Jitter: JitterNone, WaitBudget: time.Hour}
	for _, tc := range []struct {
		name string
		edit func(*Policy)
		want []time.Duration
	}{
		{"exponential", func(p *Policy) {}, millis(100, 200, 400, 800, 1000, 1000)},
		{"exponential x3", func(p *Policy) { p.Multiplier = 3 }, millis(100, 300, 900, 1000, 1000, 1000)},
		{"linear", func(p *Policy) { p.Shape = ShapeLinear }, millis(100, 200, 300, 400, 500, 600)},
		{"constant", func(p *Policy) { p.Shape = ShapeConstant }, millis(100, 100, 100, 100, 100, 100)},
		{"immediate", func(p *Policy) { p.BaseDelay = NoDelay }, millis(0, 0, 0, 0, 0, 0)},
		{"max delay zero", func(p *Policy) { p.BaseDelay, p.MaxDelay = 0, NoDelay }, millis(0, 0, 0, 0, 0, 0)},
		// An escalation (the Rust article's): retry at once, then linearly, then exponentially.
		{"custom escalation", func(p *Policy) {
			p.MaxDelay = 10 * time.Second
			p.Schedule = func(n int) time.Duration {
				switch {
				case n == 1:
					return 0
				case n <= 3:
					return time.Duration(n-1) * 500 * time.Millisecond
				}
				return time.Second << (n - 3)
			}
		}, millis(0, 500, 1000, 2000, 4000, 8000)},
		{"custom negative is immediate", func(p *Policy) { p.Schedule = func(int) time.Duration { return -time.Hour } }, millis(0, 0, 0, 0, 0, 0)},
		{"custom capped", func(p *Policy) { p.Schedule = func(int) time.Duration { return time.Hour } }, millis(1000, 1000, 1000, 1000, 1000, 1000)},
	} {
		p := base
		tc.edit(&p)
		if got := waits(p, 10); !equalDurations(got, tc.want) {
			t.Errorf("%s: waits %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestExponentialDoesNotOverflow(t *testing.T) {
	p := Policy{MaxAttempts: 200, BaseDelay: time.Second, MaxDelay: 1 << 62, Multiplier: 10, Jitter: JitterNone, WaitBudget: 1 << 62}
	l := newLoop(p, time.Time{}, false)
	for range 100 {
		d := l.next(Verdict{}, time.Time{}, false)
		if d.Wait < 0 || d.Wait > p.MaxDelay {
			t.Fatalf("wait %v outside [0, %v]", d.Wait, p.MaxDelay)
		}
		if !d.Retry {
			break
		}
	}
	// Waits near the largest duration: the budget check must not wrap.
	huge := Policy{MaxAttempts: 10, BaseDelay: 5000000000000 * time.Millisecond, MaxDelay: 9223372036854 * time.Millisecond,
		WaitBudget: 9223372036854 * time.Millisecond, Jitter: JitterNone}
	l = newLoop(huge, time.Time{}, false)
	for range 10 {
		d := l.next(Verdict{}, time.Time{}, false)
		if l.waited < 0 || l.waited > huge.WaitBudget {
			t.Fatalf("waited %v, budget %v", l.waited, huge.WaitBudget)
		}
		if !d.Retry {
			break
		}
	}
	lin := Policy{MaxAttempts: 1 << 30, BaseDelay: 1 << 40, MaxDelay: 1 << 62, Shape: ShapeLinear, Jitter: JitterNone}
	if d := rawDelay(&lin, lin.resolved(), 1<<30); d != lin.MaxDelay {
		t.Fatalf("linear raw delay %v, want the cap", d)
	}
}

func TestJitterBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	d := 100 * time.Millisecond
	for _, j := range []Jitter{JitterFull, JitterEqual, JitterDecorrelated} {
		p := Policy{MaxAttempts: 2, BaseDelay: d, MaxDelay: d, Multiplier: 1, Jitter: j, Rand: rng}
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range 5000 {
			w := waits(p, 1)[0]
			lo, hi = min(lo, w), max(hi, w)
		}
		wantLo := time.Duration(0)
		if j != JitterFull {
			wantLo = d / 2
		}
		if j == JitterDecorrelated {
			wantLo = d
		}
		if lo < wantLo || hi > d {
			t.Errorf("%v: waits in [%v, %v], want within [%v, %v]", j, lo, hi, wantLo, d)
		}
		if j == JitterFull && (lo > 5*time.Millisecond || hi < 95*time.Millisecond) {
			t.Errorf("full jitter spans only [%v, %v]", lo, hi)
		}
	}
}

func TestDecorrelatedStaysUnderTheCap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	p := Policy{MaxAttempts: 200, BaseDelay: 100 * time.Millisecond, MaxDelay: 200 * time.Millisecond, Jitter: JitterDecorrelated, WaitBudget: time.Hour, Rand: rng}
	hitCap := false
	for _, d := range waits(p, 199) {
		if d < p.BaseDelay || d > p.MaxDelay {
			t.Fatalf("wait %v outside [%v, %v]", d, p.BaseDelay, p.MaxDelay)
		}
		hitCap = hitCap || d == p.MaxDelay
	}
	if !hitCap {
		t.Fatal("U(base, 3·prev) never reached the cap: the cap was not exercised")
	}
}

func TestDecorrelatedGrowsFromBase(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := Policy{MaxAttempts: 50, BaseDelay: 10 * time.Millisecond, MaxDelay: 2 * time.Second, Jitter: JitterDecorrelated, WaitBudget: time.Hour, Rand: rng}
	w := waits(p, 49)
	prev := p.BaseDelay
	for i, d := range w {
		if d < p.BaseDelay || d > min(3*prev, p.MaxDelay) {
			t.Fatalf("retry %d: wait %v outside [%v, %v]", i+1, d, p.BaseDelay, min(3*prev, p.MaxDelay))
		}
		prev = d
	}
	if w[len(w)-1] < 100*time.Millisecond && w[len(w)-2] < 100*time.Millisecond {
		t.Fatalf("decorrelated jitter never grew: %v", w)
	}
}

func TestNotRetried(t *testing.T) {
	for _, k := range []Kind{KindQuotaExhausted, KindContextOverflow, KindPermanent} {
		l := newLoop(Policy{}, time.Time{}, false)
		if d := l.next(Verdict{Kind: k}, time.Time{}, false); d.Retry || d.Reason != StopNotRetryable {
			t.Errorf("%v: %+v, want stop not retryable", k, d)
		}
	}
	l := newLoop(Policy{}, time.Time{}, false)
	if d := l.next(Verdict{Kind: KindCanceled}, time.Time{}, false); d.Retry || d.Reason != StopCanceled {
		t.Errorf("canceled: %+v", d)
	}
	for _, k := range []Kind{KindTransient, KindRateLimited, KindOverloaded} {
		l := newLoop(Policy{}, time.Time{}, true)
		if d := l.next(Verdict{Kind: k}, time.Time{}, false); d.Retry || d.Reason != StopSideEffects {
			t.Errorf("side effects, %v: %+v", k, d)
		}
		l = newLoop(Policy{}, time.Time{}, false)
		if d := l.next(Verdict{Kind: k}, time.Time{}, false); !d.Retry {
			t.Errorf("%v not retried: %+v", k, d)
		}
	}
}

// TestUnreachedAttemptRetriedDespiteSideEffects: an attempt that never
// reached the server did nothing, so the call's side effects do not stop
// its retry; its attempts, its kind, and a body that can be sent only once
// still do.
func TestUnreachedAttemptRetriedDespiteSideEffects(t *testing.T) {
	l := newLoop(Policy{MaxAttempts: 3}, time.Time{}, true)
	for n := 1; n <= 2; n++ {
		if d := l.next(Verdict{Kind: KindTransient}, time.Time{}, true); !d.Retry {
			t.Fatalf("unreached attempt %d: %+v, want a retry", n, d)
		}
	}
	if d := l.next(Verdict{Kind: KindTransient}, time.Time{}, true); d.Retry || d.Reason != StopAttempts {
		t.Fatalf("unreached, attempts spent: %+v, want stop attempts exhausted", d)
	}
	l = newLoop(Policy{}, time.Time{}, true)
	if d := l.next(Verdict{Kind: KindPermanent}, time.Time{}, true); d.Retry || d.Reason != StopNotRetryable {
		t.Fatalf("unreached, permanent: %+v, want stop not retryable", d)
	}
	l = newLoop(Policy{}, time.Time{}, true)
	l.once = StopUnreplayableBody
	if d := l.next(Verdict{Kind: KindTransient}, time.Time{}, true); d.Retry || d.Reason != StopUnreplayableBody {
		t.Fatalf("unreached, body sent once: %+v, want stop unreplayable body", d)
	}
	if d := l.next(Verdict{Kind: KindTransient}, time.Time{}, false); d.Retry || d.Reason != StopSideEffects {
		t.Fatalf("reached, body sent once: %+v, want stop side effects", d)
	}
}

func TestServerWait(t *testing.T) {
	hint := func(d time.Duration) Verdict {
		return Verdict{Kind: KindRateLimited, ServerWait: d, HasServerWait: true}
	}
	for _, tc := range []struct {
		name   string
		p      Policy
		v      Verdict
		retry  bool
		wait   time.Duration
		reason StopReason
	}{
		{"honor", Policy{}, hint(time.Second), true, time.Second, 0},
		{"honor above max delay", Policy{MaxDelay: 300 * time.Millisecond}, hint(time.Second), true, time.Second, 0},
		{"honor zero", Policy{}, hint(0), true, 0, 0},
		{"honor too long", Policy{MaxServerWait: 300 * time.Millisecond}, hint(time.Second), false, 0, StopServerWait},
		{"honor beyond budget", Policy{WaitBudget: 500 * time.Millisecond}, hint(time.Second), false, 0, StopWaitBudget},
		{"clamp", Policy{ServerWait: ServerWaitClamp, MaxServerWait: 300 * time.Millisecond}, hint(time.Second), true, 300 * time.Millisecond, 0},
		{"clamp within", Policy{ServerWait: ServerWaitClamp}, hint(time.Second), true, time.Second, 0},
		{"ignore", Policy{ServerWait: ServerWaitIgnore, BaseDelay: 20 * time.Millisecond, Jitter: JitterNone}, hint(time.Hour), true, 20 * time.Millisecond, 0},
		{"no hint", Policy{BaseDelay: 20 * time.Millisecond, Jitter: JitterNone}, Verdict{Kind: KindRateLimited}, true, 20 * time.Millisecond, 0},
		{"negative hint is zero", Policy{}, hint(-time.Second), true, 0, 0},
	} {
		l := newLoop(tc.p, time.Time{}, false)
		d := l.next(tc.v, time.Time{}, false)
		if d.Retry != tc.retry || d.Wait != tc.wait || d.Reason != tc.reason {
			t.Errorf("%s: %+v, want retry %v wait %v reason %v", tc.name, d, tc.retry, tc.wait, tc.reason)
		}
		if tc.v.HasServerWait && tc.p.ServerWait != ServerWaitIgnore && (!d.HasServerWait || d.ServerWait != max(tc.v.ServerWait, 0)) {
			t.Errorf("%s: decision does not carry the hint: %+v", tc.name, d)
		}
	}
}

func TestDeadline(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := Policy{BaseDelay: time.Second, Jitter: JitterNone}
	l := newLoop(p, now.Add(1500*time.Millisecond), false)
	if d := l.next(Verdict{}, now, false); !d.Retry || d.Wait != time.Second {
		t.Fatalf("first: %+v", d)
	}
	if d := l.next(Verdict{}, now.Add(1100*time.Millisecond), false); d.Retry || d.Reason != StopDeadline {
		t.Fatalf("second: %+v, want stop at the deadline", d)
	}
	l = newLoop(p, now.Add(time.Second), false)
	if d := l.next(Verdict{}, now, false); d.Retry || d.Reason != StopDeadline {
		t.Fatalf("a wait that reaches the deadline exactly: %+v, want stop", d)
	}
}

func TestPerKind(t *testing.T) {
	p := Policy{
		MaxAttempts: 2, BaseDelay: 100 * time.Millisecond, Jitter: JitterNone,
		PerKind: map[Kind]Override{KindRateLimited: {MaxAttempts: 5, BaseDelay: time.Second, MaxDelay: 4 * time.Second}},
	}
	l := newLoop(p, time.Time{}, false)
	var got []time.Duration
	for {
		d := l.next(Verdict{Kind: KindRateLimited}, time.Time{}, false)
		if !d.Retry {
			if d.Reason != StopAttempts {
				t.Fatalf("stopped for %v", d.Reason)
			}
			break
		}
		got = append(got, d.Wait)
	}
	if want := millis(1000, 2000, 4000, 4000); !equalDurations(got, want) {
		t.Fatalf("rate-limited waits %v, want %v", got, want)
	}
	l = newLoop(p, time.Time{}, false)
	l.next(Verdict{Kind: KindRateLimited}, time.Time{}, false)
	if d := l.next(Verdict{Kind: KindTransient}, time.Time{}, false); d.Retry || d.Reason != StopAttempts {
		t.Fatalf("a transient failure after 2 attempts: %+v, want stop (transient allows 2)", d)
	}
}

// randomPolicy draws a valid policy, whole milliseconds throughout so that
// its JSON form is exact.
func randomPolicy(r *rand.Rand) Policy {
	msOrZero := func(n int64) time.Duration {
		switch r.IntN(6) {
		case 0:
			return 0
		case 1:
			return NoDelay
		}
		return time.Duration(1+r.Int64N(n)) * time.Millisecond
	}
	p := Policy{
		MaxAttempts:   r.IntN(8),
		Multiplier:    []float64{0, 1, 1.5, 2, 3}[r.IntN(5)],
		Jitter:        Jitter(r.IntN(len(jitterNames))),
		Shape:         Shape(r.IntN(3)),
		WaitBudget:    msOrZero(20000),
		MaxServerWait: msOrZero(5000),
		ServerWait:    ServerWait(r.IntN(3)),
	}
	if r.IntN(4) == 0 {
		p.AttemptTimeout = time.Duration(1+r.IntN(5000)) * time.Millisecond
	}
	p.MaxDelay = msOrZero(10000)
	p.BaseDelay = msOrZero(int64(max(p.resolved().max/time.Millisecond, 1)))
	if p.Validate() != nil {
		p.BaseDelay = 0
	}
	if r.IntN(3) == 0 {
		p.PerKind = map[Kind]Override{KindRateLimited: {MaxAttempts: 1 + r.IntN(8), BaseDelay: msOrZero(2000)}}
		o := p.PerKind[KindRateLimited]
		o.MaxDelay = max(o.BaseDelay, p.resolved().max)
		p.PerKind[KindRateLimited] = o
	}
	return p
}

func randomVerdict(r *rand.Rand) Verdict {
	v := Verdict{Kind: Kind(r.IntN(3))}
	if r.IntN(3) == 0 {
		v.ServerWait, v.HasServerWait = time.Duration(r.Int64N(3000))*time.Millisecond, true
	}
	if r.IntN(40) == 0 {
		v.Kind = Kind(3 + r.IntN(4))
	}
	return v
}

// TestLoopProperties checks, over many random policies and failure
// sequences, that no computed delay leaves [0, max delay], the total wait
// never exceeds the budget, attempts never exceed the maximum, and a call
// with side effects never gets a second attempt.
func TestLoopProperties(t *testing.T) {
	const seed = 2026
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	retries, stops := 0, map[StopReason]int{}
	for i := range 3000 {
		p := randomPolicy(r)
		if err := p.Validate(); err != nil {
			t.Fatalf("policy %d: generated an invalid policy: %v", i, err)
		}
		p.Rand = r
		side := r.IntN(10) == 0
		l := newLoop(p, time.Time{}, side)
		attempts, waited := 1, time.Duration(0)
		for {
			v := randomVerdict(r)
			d := l.next(v, time.Time{}, false)
			if !d.Retry {
				stops[d.Reason]++
				break
			}
			retries++
			if side {
				t.Fatalf("policy %d: a call with side effects was retried", i)
			}
			b := p.forKind(v.Kind)
			if !d.HasServerWait && (d.Wait < 0 || d.Wait > b.max) {
				t.Fatalf("policy %d %+v: wait %v outside [0, %v]", i, p, d.Wait, b.max)
			}
			if d.HasServerWait && p.ServerWait == ServerWaitClamp && d.Wait > p.maxServerWait() {
				t.Fatalf("policy %d: clamped wait %v above %v", i, d.Wait, p.maxServerWait())
			}
			waited += d.Wait
			attempts++
			if waited > p.waitBudget() {
				t.Fatalf("policy %d: waited %v, budget %v", i, waited, p.waitBudget())
			}
			maxAttempts := max(p.resolved().maxAttempts, p.forKind(KindRateLimited).maxAttempts)
			if attempts > maxAttempts {
				t.Fatalf("policy %d: attempt %d above the maximum %d", i, attempts, maxAttempts)
			}
		}
		if waited != l.waited || attempts != l.attempts {
			t.Fatalf("policy %d: loop reports %d attempts %v waited, counted %d %v", i, l.attempts, l.waited, attempts, waited)
		}
	}
	// The draw must reach every way of stopping, or the test proves little.
	t.Logf("%d retries; stops %v", retries, stops)
	for _, r := range []StopReason{StopAttempts, StopWaitBudget, StopNotRetryable, StopServerWait, StopSideEffects} {
		if stops[r] == 0 {
			t.Errorf("no policy stopped for %v", r)
		}
	}
}

// TestJSONRoundTripBehaviour marshals and unmarshals random policies and
// checks that the result makes the same decisions for the same failures
// and random draws.
func TestJSONRoundTripBehaviour(t *testing.T) {
	const seed = 77
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	for i := range 2000 {
		p := randomPolicy(r)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("policy %d: %v", i, err)
		}
		var q Policy
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatalf("policy %d: unmarshal %s: %v", i, b, err)
		}
		b2, _ := json.Marshal(q)
		if string(b) != string(b2) {
			t.Fatalf("policy %d: second marshal differs:\n%s\n%s", i, b, b2)
		}
		vs := make([]Verdict, 12)
		for j := range vs {
			vs[j] = randomVerdict(r)
		}
		draw := r.Uint64()
		p.Rand, q.Rand = rand.New(rand.NewPCG(draw, 1)), rand.New(rand.NewPCG(draw, 1))
		lp, lq := newLoop(p, time.Time{}, false), newLoop(q, time.Time{}, false)
		for _, v := range vs {
			dp, dq := lp.next(v, time.Time{}, false), lq.next(v, time.Time{}, false)
			if dp != dq {
				t.Fatalf("policy %d %s: decisions differ after a round trip: %+v vs %+v", i, b, dp, dq)
			}
			if !dp.Retry {
				break
			}
		}
	}
}
