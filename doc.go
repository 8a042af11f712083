// Package rebound is the resilience layer around the calls an AI agent
// makes to LLM APIs and tools.
//
// Agents fan out dozens of calls, and providers answer with 429s, 503s,
// 529s, quota and context-length errors. A loop of three sleeps retries the
// errors that can never succeed, wakes every client at the same instant,
// replays calls that had side effects and keeps waiting after the caller
// has left. rebound does the right thing by default:
//
//	answer, err := rebound.Do(ctx, rebound.Policy{}, func(ctx context.Context) (string, error) {
//		return callModel(ctx, prompt)
//	})
//
// # A call
//
// Do (and Run, for functions that return only an error) makes an attempt.
// If it fails, a classifier (Classify unless the Policy names another)
// returns a Verdict: the Kind of failure, and any wait the server asked
// for. Transient, rate-limited and overloaded failures are retried;
// permanent ones (a 400, a 401), exhausted quotas, oversized requests and
// the caller's own cancellation are not. Functions that know better wrap
// their error with Permanent or Retryable.
//
// # Waiting
//
// The wait before retry n is BaseDelay·Multiplier^(n−1) (or a linear,
// constant or custom schedule), capped at MaxDelay, then jittered (full
// jitter by default, never above the cap). A server's wait hint
// (Retry-After, retry-after-ms) replaces the computed delay; a hint longer
// than MaxServerWait stops the call with an error carrying the hint,
// because retrying sooner only buys another 429. Two bounds sit beyond the
// number of attempts: the wait budget (total time spent waiting) and the
// caller's deadline. When the next wait would overrun either, the call
// stops at once with the last error instead of sleeping into a certain
// failure.
//
// # Side effects
//
// A call whose context is marked WithSideEffects is attempted once: a
// timeout does not mean the message was not sent. Transport, which sees
// the wire, makes one exception: an attempt that provably never reached
// the server (no connection was made for it, or the server refused it with
// a 429, 503 or 529) did nothing, and is made again. Transport.SideEffects
// marks requests by what they are: ProviderSideEffects knows the
// providers' APIs, so that a request that creates a file, a batch or a job
// is not made twice while a model call is retried. An Idempotency-Key
// header lifts the mark: the server then carries a request out once,
// however often it comes.
//
// # Streams
//
// Stream retries a stream while nothing has reached the caller; after the
// first event, the stream is the caller's and is never replayed.
// StreamWith adds an honest end: given the event that ends a whole answer,
// a stream that ends or breaks before it yields an *IncompleteStreamError,
// never a clean end; and a bound on silence. Transport does the same for
// the event streams of the providers' HTTP APIs.
//
// # The decisions are a pure step
//
// All of the above is decided by one step that never sleeps and never
// reads the clock: it asks the call's Clock (WithClock) for the time and
// the waits. Do drives it in real time; simulations drive the very same
// code, Run under a virtual clock, in virtual time.
//
// # Seeing it
//
// An Observer receives an Event for every attempt, every scheduled retry and
// every give-up. The error of a call that gave up is a *GiveUpError: it
// says how many attempts were made and why the loop stopped, and wraps the
// last error for errors.Is and errors.As.
package rebound
