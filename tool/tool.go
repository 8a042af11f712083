// Package tool guards an agent's tool executor: it retries what is safe to
// retry, never replays a side effect, and turns every failure into a
// result the model can read.
//
// A Registry says, tool by tool, what a call may do again:
//
//   - ReadOnly tools (search, read, query) are retried under their
//     policy, and may be hedged: a second attempt after a delay, the first
//     answer wins and the other is cancelled.
//   - SideEffect tools (append, send, pay) are attempted exactly once: a
//     timeout does not mean nothing happened.
//   - Idempotent tools have side effects but accept an idempotency key:
//     the guard derives a stable key from the tool's name and the call's ID
//     and arguments, hands it to the tool (IdempotencyKey), and then
//     retries safely; the tool passes the key on, e.g. as an
//     Idempotency-Key header, so that its server can answer a repeat from
//     its record.
//
// A failure comes back as a Failure: the tool, the verdict, the attempts
// made and, for a side effect whose outcome is unknown, that it may have
// taken effect and should be checked before trying again. The agent puts
// it in the conversation and lets the model decide, which is safer than
// guessing in code.
package tool

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/observe"
)

// Kind is what a tool's calls may safely do again.
type Kind uint8

// Kinds of tool.
const (
	// ReadOnly tools are retried under their policy.
	ReadOnly Kind = iota
	// SideEffect tools are attempted exactly once.
	SideEffect
	// Idempotent tools have side effects but accept an idempotency key,
	// and so are retried with one.
	Idempotent
)

func (k Kind) String() string {
	switch k {
	case ReadOnly:
		return "read-only"
	case SideEffect:
		return "side-effect"
	case Idempotent:
		return "idempotent"
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Call is one tool call the model asked for.
type Call struct {
	// ID is the model's ID for the call (OpenAI's tool_call id,
	// Anthropic's tool_use id).
	ID   string
	Name string
	// Arguments are the call's arguments, as the model wrote them (JSON).
	Arguments json.RawMessage
}

// Func runs a tool call and returns its output for the model.
type Func func(ctx context.Context, call Call) (string, error)

// Spec says how a tool's calls are guarded.
type Spec struct {
	Kind Kind
	// Policy is the retry policy of ReadOnly and Idempotent tools (a
	// SideEffect tool gets one attempt whatever it says). The zero Policy
	// is rebound's default.
	Policy rebound.Policy
	// Hedge, for a ReadOnly tool, starts a second attempt when the first
	// is slow.
	Hedge Hedge
}

// Hedge starts a second attempt of a read-only call when the first has not
// answered after a delay; the first answer wins and the other attempt is
// cancelled (and waited for: tools must heed their context). The delay is
// the Percentile of the tool's recent latencies once there are enough of
// them, else After. A hedge draws from the Spec's Policy.Budget like a
// retry, and is not made when the budget is spent. The zero Hedge hedges
// nothing.
type Hedge struct {
	After time.Duration
	// Percentile, in (0, 1), e.g. 0.95: hedge calls slower than 95% of
	// recent ones.
	Percentile float64
}

func (h Hedge) enabled() bool { return h.After > 0 || (h.Percentile > 0 && h.Percentile < 1) }

// Registry holds the tools an agent may call. It is safe for concurrent
// use.
type Registry struct {
	mu    sync.RWMutex // guards tools
	tools map[string]*entry
}

type entry struct {
	spec Spec
	fn   Func

	mu        sync.Mutex      // guards latencies and next
	latencies []time.Duration // a ring of recent latencies, for Hedge.Percentile
	next      int
}

// latencySamples is how many recent latencies a hedged tool keeps, and
// minSamples how many it needs before it trusts their percentile.
const (
	latencySamples = 128
	minSamples     = 16
)

// Register adds a tool, replacing any of the same name.
func (r *Registry) Register(name string, spec Spec, fn Func) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tools == nil {
		r.tools = map[string]*entry{}
	}
	r.tools[name] = &entry{spec: spec, fn: fn}
}

// ErrUnknownTool is the error of a call to a tool nobody registered.
var ErrUnknownTool = errors.New("tool: unknown tool")

// Result is the outcome of one tool call: its output, or a Failure to show
// the model.
type Result struct {
	Call   Call
	Output string
	// Failure is nil on success.
	Failure *Failure
	// Err is the underlying error, for the program (never shown to the
	// model as it is).
	Err error
}

// Failure is a failed tool call as the model should see it. Its JSON form
// is what an agent puts in the conversation as the tool's result.
type Failure struct {
	Tool     string `json:"tool"`
	CallID   string `json:"call_id,omitempty"`
	Verdict  string `json:"verdict"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
	// MayHaveTakenEffect is set for a side effect whose outcome is
	// unknown: a timeout or a broken connection after the request left.
	MayHaveTakenEffect bool   `json:"may_have_taken_effect"`
	Advice             string `json:"advice"`
}

// String returns the failure as JSON, ready for the conversation.
func (f *Failure) String() string {
	b, _ := json.Marshal(f)
	return string(b)
}

// maxErrorText bounds the error text a model is shown.
const maxErrorText = 300

// Execute runs call under its tool's guard.
func (r *Registry) Execute(ctx context.Context, call Call) Result {
	r.mu.RLock()
	e := r.tools[call.Name]
	r.mu.RUnlock()
	if e == nil {
		err := fmt.Errorf("%w %q", ErrUnknownTool, call.Name)
		return Result{Call: call, Err: err, Failure: &Failure{Tool: call.Name, CallID: call.ID,
			Verdict: rebound.KindPermanent.String(), Error: err.Error(), Advice: "No such tool: call one of the tools you were given."}}
	}
	p := e.spec.Policy
	switch e.spec.Kind {
	case SideEffect:
		ctx = rebound.WithSideEffects(ctx)
	case Idempotent:
		ctx = context.WithValue(ctx, keyKey{}, IdempotencyKeyOf(call))
	}
	attempts := 0
	var lastVerdict rebound.Verdict
	p.Observer = observe.Multi(rebound.ObserverFunc(func(ev rebound.Event) {
		if ev.Type == rebound.EventAttempt {
			attempts = ev.Attempt
		}
		if ev.Type == rebound.EventRetry || ev.Type == rebound.EventGiveUp {
			lastVerdict = ev.Verdict
		}
	}), p.Observer)
	fn := func(ctx context.Context) (string, error) { return e.timed(ctx, call) }
	if e.spec.Kind == ReadOnly && e.spec.Hedge.enabled() {
		fn = func(ctx context.Context) (string, error) { return e.hedged(ctx, call) }
	}
	out, err := rebound.Do(ctx, p, fn)
	if err == nil {
		return Result{Call: call, Output: out}
	}
	return Result{Call: call, Err: err, Failure: e.failure(call, err, lastVerdict, attempts)}
}

// timed runs one attempt and notes its latency for hedging.
func (e *entry) timed(ctx context.Context, call Call) (string, error) {
	start := time.Now()
	out, err := e.fn(ctx, call)
	if err == nil && e.spec.Hedge.enabled() {
		e.mu.Lock()
		if len(e.latencies) < latencySamples {
			e.latencies = append(e.latencies, time.Since(start))
		} else {
			e.latencies[e.next] = time.Since(start)
			e.next = (e.next + 1) % latencySamples
		}
		e.mu.Unlock()
	}
	return out, err
}

// hedgeDelay is how long to wait before hedging.
func (e *entry) hedgeDelay() time.Duration {
	h := e.spec.Hedge
	if h.Percentile > 0 && h.Percentile < 1 {
		e.mu.Lock()
		sorted := slices.Clone(e.latencies)
		e.mu.Unlock()
		if len(sorted) >= minSamples {
			slices.Sort(sorted)
			return sorted[int(h.Percentile*float64(len(sorted)-1))]
		}
	}
	return h.After
}

type answer struct {
	out string
	err error
}

// hedged runs an attempt and, if it is slow, a second one beside it; the
// first success wins and the other is cancelled and waited for. A first
// attempt that fails before the hedge starts is returned as it is, for the
// policy to judge.
func (e *entry) hedged(ctx context.Context, call Call) (string, error) {
	delay := e.hedgeDelay()
	if delay <= 0 {
		return e.timed(ctx, call)
	}
	ctx, cancel := context.WithCancel(ctx)
	answers := make(chan answer, 2)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait() // no attempt outlives the call
	}()
	launch := func() {
		wg.Go(func() {
			out, err := e.timed(ctx, call)
			answers <- answer{out, err}
		})
	}
	launch()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	running, hedging := 1, false
	var last answer
	for running > 0 {
		select {
		case <-timer.C:
			// A hedge is a retry as far as the provider is concerned: it
			// draws from the policy's retry budget, if any, and is not
			// made when that is spent.
			if b := e.spec.Policy.Budget; b != nil && !b.Withdraw(time.Now()) {
				continue
			}
			hedging = true
			running++
			launch()
		case a := <-answers:
			running--
			if a.err == nil || !hedging {
				return a.out, a.err
			}
			last = a
		}
	}
	return last.out, last.err
}

// failure describes a failed call for the model.
func (e *entry) failure(call Call, err error, v rebound.Verdict, attempts int) *Failure {
	var gu *rebound.GiveUpError
	if errors.As(err, &gu) {
		v, attempts = gu.Verdict, gu.Attempts
		if gu.Err != nil { // nil when the call never ran its function (an invalid policy, an open breaker)
			err = gu.Err
		}
	}
	msg := err.Error()
	if len(msg) > maxErrorText {
		msg = msg[:maxErrorText] + "…"
	}
	f := &Failure{Tool: call.Name, CallID: call.ID, Verdict: v.Kind.String(), Attempts: attempts, Error: msg}
	unknownOutcome := v.Kind == rebound.KindTransient || v.Kind == rebound.KindOverloaded || v.Kind == rebound.KindCanceled
	switch {
	case e.spec.Kind == SideEffect && unknownOutcome:
		f.MayHaveTakenEffect = true
		f.Advice = "The call failed without a clear answer and may still have taken effect. Check whether it did before calling it again."
	case v.Kind == rebound.KindPermanent:
		f.Advice = "The tool rejected these arguments; retrying them unchanged will fail again. Fix the arguments or choose another approach."
	case v.Kind == rebound.KindQuotaExhausted:
		f.Advice = "The tool's quota is exhausted; it will not work again soon. Continue without it."
	case v.Kind == rebound.KindContextOverflow:
		f.Advice = "The input was too large for the tool. Send less."
	case v.Kind == rebound.KindCanceled:
		f.Advice = "The call was cancelled."
	default:
		f.Advice = "The tool is failing for now; retrying it at once is unlikely to help. Continue without it or try later."
	}
	return f
}

type keyKey struct{}

// IdempotencyKey returns the key the guard derived for an Idempotent
// tool's call, for the tool to pass on (e.g. as an Idempotency-Key
// header); empty for other tools.
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(keyKey{}).(string)
	return k
}

// IdempotencyKeyOf derives the stable idempotency key of a call: the same
// tool, call ID and arguments give the same key, whatever the attempt.
// Arguments are compacted first, so that whitespace does not change it.
func IdempotencyKeyOf(call Call) string {
	h := sha256.New()
	h.Write([]byte(call.Name))
	h.Write([]byte{0})
	h.Write([]byte(call.ID))
	h.Write([]byte{0})
	args := []byte(call.Arguments)
	var compact bytes.Buffer
	if json.Compact(&compact, args) == nil {
		args = compact.Bytes()
	}
	h.Write(args)
	return "rebound-" + hex.EncodeToString(h.Sum(nil)[:16])
}
