// Package tool guards an agent's tool executor: it retries what is safe to
// retry, never replays a side effect, and turns every failure into a
// result the model can read.
//
// A Registry says, tool by tool, what a call may do again:
//
//   - ReadOnly tools (search, read, query) are retried under their
//     policy, and may be hedged: a second attempt after a delay, the first
//     answer wins and the other is cancelled.
//   - SideEffects tools (append, send, pay) are attempted exactly once: a
//     timeout does not mean nothing happened. So is a tool of Unknown
//     kind, the zero Kind: a tool nobody said is safe to repeat is not.
//   - Idempotent tools have side effects but accept an idempotency key:
//     the guard derives a key from the tool's name and the call's ID and
//     arguments, hands it to the tool (IdempotencyKey), and then retries
//     safely; the tool passes the key on, e.g. as an Idempotency-Key
//     header, so that its server can answer a repeat from its record. A
//     call with an ID keeps its key across replicas and restarts; a call
//     without one gets a fresh random key for each Execute, so that two
//     calls meant to be made twice ("charge $5", twice) are never taken
//     for one.
//
// A tool's server may keep no such record, and a replica that runs a call
// again cannot ask it. A Registry with Records keeps its own: the outcome
// of each call with side effects that has an ID, under its idempotency
// key, so that the same call made again, by a replayed agent step, another
// replica or a restarted process, is answered from the record and never
// made twice. A call's key is claimed with a lease while it runs; another
// Execute of the same call waits for its outcome, up to a bound, and else
// fails with ErrInProgress, never making the call itself. A lease that
// ran out (its holder died) lets the call be made again, and the Result
// says that the outcome of the first run is unknown. A run whose outcome
// is unknown (a lost reply) is recorded so: the call is not made again on
// any replica, and its repeats are told to check whether it took effect.
// MemoryRecords keep one process's records; package reboundredis shares
// them between replicas.
//
// A tool registered wrongly (no Func, an unknown Kind, an invalid Policy
// or Hedge) is never run: each call to it fails with a SpecError, and
// Spec.Validate tells beforehand. A call whose context is already done is
// not started. A panic in a tool reaches the caller of Execute, in its own
// goroutine, even from a hedge's attempt.
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
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/runes"
	"github.com/rebound-go/rebound/observe"
)

// Call is one tool call the model asked for.
type Call struct {
	// ID is the model's ID for the call (OpenAI's tool_call id,
	// Anthropic's tool_use id). An Idempotent tool's key is derived from
	// it, so that a call replayed with the same ID, by another replica or
	// after a restart, is recognised by the tool's server, and by the
	// Registry's Records. Without an ID a call has no identity beyond one
	// Execute: its retries share a random key, the next Execute of the
	// same arguments gets another, and no record is kept.
	ID   string
	Name string
	// Arguments are the call's arguments, as the model wrote them (JSON).
	Arguments json.RawMessage
}

// Func runs a tool call and returns its output for the model. It heeds
// ctx: a hedged tool's losing attempt is cancelled and waited for.
type Func func(ctx context.Context, call Call) (string, error)

// Spec says how a tool's calls are guarded.
type Spec struct {
	// Kind says what the tool's calls may do again. The zero Kind,
	// Unknown, is attempted once, as SideEffects is.
	Kind Kind
	// Policy is the retry policy of ReadOnly and Idempotent tools (a
	// SideEffects or Unknown tool gets one attempt whatever it says). The zero Policy
	// is rebound's default.
	Policy rebound.Policy
	// Hedge, for a ReadOnly tool only, starts a second attempt when the
	// first is slow.
	Hedge Hedge
}

// Validate reports the first thing wrong with s, as a *SpecError, or nil.
// Execute runs nothing for a tool registered with an invalid Spec.
func (s Spec) Validate() error {
	if s.Kind > SideEffects {
		return &SpecError{Field: "Kind", Reason: fmt.Sprintf("no such kind %v; want ReadOnly, Idempotent or SideEffects", s.Kind)}
	}
	if err := s.Policy.Validate(); err != nil {
		se := &SpecError{Field: "Policy", Reason: err.Error(), Err: err}
		var pe *rebound.PolicyError
		if errors.As(err, &pe) {
			se.Field, se.Reason = "Policy."+pe.Key, pe.Reason
		}
		return se
	}
	h := s.Hedge
	if h.After < 0 {
		return &SpecError{Field: "Hedge.After", Reason: fmt.Sprintf("must not be negative (got %v)", h.After)}
	}
	if h.Percentile != 0 && !(h.Percentile > 0 && h.Percentile <= 1) {
		return &SpecError{Field: "Hedge.Percentile", Reason: fmt.Sprintf("must be in (0, 1], e.g. 0.95 for the 95th (got %v)", h.Percentile)}
	}
	if h.enabled() && s.Kind != ReadOnly {
		return &SpecError{Field: "Hedge", Reason: fmt.Sprintf("only read-only tools are hedged (got %v)", s.Kind)}
	}
	if s.Policy.Hedge != nil && s.Kind != ReadOnly {
		return &SpecError{Field: "Policy.Hedge", Reason: fmt.Sprintf("only read-only tools are hedged (got %v)", s.Kind)}
	}
	return nil
}

// SpecError says what is wrong with a tool's registration. Execute returns
// it, with a Failure, for every call to that tool, and runs nothing.
type SpecError struct {
	Tool   string // the tool's name; empty from Spec.Validate
	Field  string // what is at fault: "Func", "Kind", "Hedge.Percentile", "Policy.max_attempts"...
	Reason string
	Err    error // the Policy's error, for an invalid Policy
}

func (e *SpecError) Error() string {
	if e.Tool == "" {
		return "tool: " + e.Field + ": " + e.Reason
	}
	return fmt.Sprintf("tool: %q: %s: %s", clip(e.Tool), e.Field, e.Reason)
}

// Unwrap returns the Policy's error, if that is what is wrong.
func (e *SpecError) Unwrap() error { return e.Err }

// Hedge starts a second attempt of a read-only call when the first has not
// answered after a delay; the first answer wins and the other attempt is
// cancelled (and waited for: tools must heed their context). The delay is
// the Percentile of the tool's recent latencies once 16 are known, else
// After. It is a rebound.Hedge in the tool's Policy, kept per tool: a hedge
// draws from the Spec's Policy.Budget like a retry, and is not made when
// the budget is spent. The zero Hedge hedges nothing.
//
// A panic (or runtime.Goexit) in either attempt is raised again in the
// caller's goroutine, with its own value, once the other attempt has been
// cancelled and has ended; if both panic, the first is raised. A panic is
// raised even when the other attempt had already answered: it is a bug to
// see, not an answer to drop.
type Hedge struct {
	// After is the delay before hedging, while there are too few recent
	// latencies for Percentile. Zero means none: no hedge until then.
	After time.Duration
	// Percentile, in (0, 1], e.g. 0.95: hedge calls slower than 95% of
	// recent ones; 1 hedges calls slower than all of them. Zero means
	// After alone.
	Percentile float64
}

func (h Hedge) enabled() bool { return h.After > 0 || h.Percentile > 0 }

// Registry holds the tools an agent may call. Its fields are set before
// it is first used; then it is safe for concurrent use. The zero Registry
// keeps no records.
type Registry struct {
	// Records, if set, keeps the outcome of each call with side effects
	// (SideEffects, Unknown and Idempotent tools) that has an ID, so that the call
	// made again is answered from its record (Result.Recorded) instead of
	// being made twice; see Records. Nil keeps none, so that every Execute
	// runs its call: some servers give their tool calls IDs that repeat,
	// and a record keeps a call's output for a day. MemoryRecords keep one
	// process's calls; package reboundredis shares them between replicas.
	Records Records
	// Lease is how long a claim on a call's key outlives a holder that
	// stopped renewing it (every third of the lease while its call runs):
	// how long a call whose process died keeps others waiting. Zero (or
	// less) means DefaultLease (10 s).
	Lease time.Duration
	// Wait bounds how long a call whose key another holder has claimed
	// waits for that run's outcome before failing with ErrInProgress.
	// Zero means DefaultWait (10 s); negative means no wait.
	Wait time.Duration

	mu    sync.RWMutex // guards tools
	tools map[string]*entry
}

type entry struct {
	spec    Spec
	fn      Func
	invalid *SpecError     // what is wrong with spec or fn, if anything; then nothing runs
	hedge   *rebound.Hedge // the tool's recent latencies and its hedge delay; nil: not hedged
}

// Register adds a tool, replacing any of the same name. A tool with a nil
// fn or an invalid spec (see Spec.Validate) is registered all the same, so
// that calls to it fail with a SpecError instead of being unknown.
func (r *Registry) Register(name string, spec Spec, fn Func) {
	e := &entry{spec: spec, fn: fn}
	if h := spec.Hedge; spec.Kind == ReadOnly && h.enabled() {
		e.hedge = &rebound.Hedge{After: h.After, Percentile: h.Percentile}
		if h.Percentile == 0 {
			e.hedge.Percentile = -1 // After alone
		}
	}
	if err := spec.Validate(); err != nil {
		e.invalid = err.(*SpecError)
	} else if fn == nil {
		e.invalid = &SpecError{Field: "Func", Reason: "is nil; want the function that runs the tool"}
	}
	if e.invalid != nil {
		e.invalid.Tool = name
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tools == nil {
		r.tools = map[string]*entry{}
	}
	r.tools[name] = e
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
	// Recorded is set when the outcome is an earlier run's, answered from
	// the Registry's Records: the call was not made again.
	Recorded bool
	// PriorRunUnknown is set when the call was made, or the run a
	// Recorded outcome is of was made, after an earlier run of it, claimed
	// by a holder that died, ended without a record: that run may have
	// taken effect too.
	PriorRunUnknown bool
}

// Failure is a failed tool call as the model should see it. Its JSON form
// is what an agent puts in the conversation as the tool's result.
type Failure struct {
	Tool   string `json:"tool"`
	CallID string `json:"call_id,omitempty"`
	// Verdict is the failure's kind (see rebound.Kind), or "refused"
	// for a call a spend cap refused before it was made (cost.WithCaps).
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

// clip cuts s to maxErrorText bytes, on a character boundary.
func clip(s string) string {
	if cut := runes.Cut(s, maxErrorText); cut != s {
		return cut + "…"
	}
	return s
}

// Execute runs call under its tool's guard. A call to an unknown or
// misregistered tool, or whose ctx is already done, runs nothing and comes
// back as a Failure with 0 attempts.
//
// With Records set, a call with side effects and an ID is first looked up
// by its key: a recorded outcome is returned as it is (Recorded), without
// running the call; a key another holder has claimed is waited for, up to
// Wait, and then fails with ErrInProgress, never run here. A run ends in a
// record when a second run would end the same or might repeat an effect:
// a success, a failure that may have taken effect (kept as a Failure that
// says so, which no one settles by trying again), and a failure that the
// same arguments would meet again (permanent, context overflow). A refusal
// that did nothing (a rate limit, a spent quota) gives the key up for a
// later try. Records that cannot be checked fail the call, unmade.
func (r *Registry) Execute(ctx context.Context, call Call) Result {
	r.mu.RLock()
	e := r.tools[call.Name]
	r.mu.RUnlock()
	switch {
	case e == nil:
		return refusal(call, fmt.Errorf("%w %q", ErrUnknownTool, clip(call.Name)), rebound.KindPermanent,
			"No such tool: call one of the tools you were given.")
	case e.invalid != nil:
		return refusal(call, e.invalid, rebound.KindPermanent, "The tool is misconfigured and cannot run. Continue without it.")
	case ctx.Err() != nil:
		// Not started, so certainly without effect, which a tool handed
		// a done context could not promise.
		return refusal(call, context.Cause(ctx), rebound.KindCanceled, "The call was cancelled before it started; nothing was done.")
	}
	// A read-only call needs no record, and a call without an ID has no
	// identity to record it by.
	if r.Records != nil && e.spec.Kind != ReadOnly && call.ID != "" {
		return r.recorded(ctx, e, call, r.Records)
	}
	res, _ := e.run(ctx, call, "")
	return res
}

// refusal is the result of a call that was not made.
func refusal(call Call, err error, v rebound.Kind, advice string) Result {
	return Result{Call: call, Err: err, Failure: &Failure{Tool: clip(call.Name), CallID: call.ID,
		Verdict: v.String(), Error: clip(err.Error()), Advice: advice}}
}

// run makes call under its tool's policy, with key as an Idempotent tool's
// idempotency key (derived here if empty), and returns its result and, for
// a failure, the verdict on it.
func (e *entry) run(ctx context.Context, call Call, key string) (Result, rebound.Kind) {
	p := e.spec.Policy
	switch e.spec.Kind {
	case Unknown, SideEffects:
		ctx = rebound.WithSideEffects(ctx)
	case Idempotent:
		if key == "" {
			key = IdempotencyKeyOf(call)
		}
		ctx = context.WithValue(ctx, keyKey{}, key)
	}
	attempts := 0
	var lastVerdict rebound.Verdict
	doubt := false // an attempt ended without saying whether it took effect
	p.Observer = observe.Multi(rebound.ObserverFunc(func(ev rebound.Event) {
		if ev.Type == rebound.EventAttempt {
			attempts = ev.Attempt
		}
		if ev.Type == rebound.EventRetry || ev.Type == rebound.EventGiveUp {
			lastVerdict = ev.Verdict
			doubt = doubt || unknownOutcome(ev.Verdict.Kind)
		}
	}), p.Observer)
	switch {
	case e.spec.Kind != ReadOnly:
		p.Hedge = nil // two runs at once of a side effect: never
	case e.hedge != nil:
		p.Hedge = e.hedge
	}
	out, err := rebound.Do(ctx, p, func(ctx context.Context) (string, error) { return e.fn(ctx, call) })
	if err == nil {
		return Result{Call: call, Output: out}, 0
	}
	f, v := e.failure(call, err, lastVerdict, attempts, doubt)
	return Result{Call: call, Err: err, Failure: f}, v
}

// unknownOutcome reports whether a failure of kind k leaves unsaid whether
// the call took effect: a timeout, a broken connection, a server error
// after the request left, a cancellation.
func unknownOutcome(k rebound.Kind) bool {
	return k == rebound.KindTransient || k == rebound.KindOverloaded || k == rebound.KindCanceled
}

// failure describes a failed call for the model, and returns the verdict
// on it. doubt says that some attempt, if not the last, ended without
// saying whether it took effect.
func (e *entry) failure(call Call, err error, v rebound.Verdict, attempts int, doubt bool) (*Failure, rebound.Kind) {
	var gu *rebound.GiveUpError
	refused := false // a spend cap refused an attempt before it was sent
	if errors.As(err, &gu) {
		v, attempts = gu.Verdict, gu.Attempts
		refused = gu.Reason == rebound.StopRefused
		if gu.Err != nil { // nil when the call never ran its function (an invalid policy, an open breaker)
			err = gu.Err
		}
	}
	f := &Failure{Tool: call.Name, CallID: call.ID, Verdict: v.Kind.String(), Attempts: attempts, Error: clip(err.Error())}
	switch {
	// An idempotent call too: the model's next call has a new ID, and so a
	// new key that its server will not recognise. So too when only an
	// earlier attempt was in doubt: a rate limit on the retry does not
	// undo it. But a call never attempted (an open breaker) did nothing.
	case e.spec.Kind != ReadOnly && attempts > 0 && (doubt || unknownOutcome(v.Kind)):
		f.MayHaveTakenEffect = true
		f.Advice = "The call failed without a clear answer and may still have taken effect. Check whether it did before calling it again."
	case refused:
		f.Verdict = "refused"
		f.Advice = "The run's spend cap does not allow this call. Finish with what you have, or stop."
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
	return f, v.Kind
}

type keyKey struct{}

// IdempotencyKey returns the key the guard derived for an Idempotent
// tool's call, for the tool to pass on (e.g. as an Idempotency-Key
// header); empty for other tools.
func IdempotencyKey(ctx context.Context) string {
	k, _ := ctx.Value(keyKey{}).(string)
	return k
}

// IdempotencyKeyOf derives the idempotency key of a call: the same tool,
// call ID and arguments give the same key, in any process, and Arguments
// are compacted first, so that whitespace does not change it. A call
// without an ID has nothing that tells it from another call of the same
// arguments meant to be made again, so it gets a fresh random key each
// time: Execute derives the key once, and its retries share it.
func IdempotencyKeyOf(call Call) string {
	if call.ID == "" {
		// From the system's secure source: a key must differ between
		// processes, which a seeded generator cannot promise.
		var nonce [16]byte
		rand.Read(nonce[:]) // never fails, per its documentation
		return "rebound-" + hex.EncodeToString(nonce[:])
	}
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
