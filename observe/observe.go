// Package observe turns rebound's events into something a person can
// watch: structured log records (Slog), and a retry-rate alarm per target
// (Monitor).
//
// The retry count is a metric, not a setting: a tool whose retry rate
// stays above 5% says that something is wrong upstream or in the caller's
// concurrency, and raising the number of attempts only hides it. Monitor
// says so once when a target's rate crosses the threshold, once more when
// it is back under, and separately when the rate jumps (from 2% to 15%,
// say).
//
// Log records never hold a secret or a prompt: only the target, attempt
// numbers, verdicts, statuses, the provider's error type and code, waits
// and a bounded error message (rebound.Transport scrubs the request's
// credentials from its errors before they reach an observer, and a record
// scrubs anything shaped like an API key or a bearer token from any
// error's message).
//
// The "rebound.call" records are what `rebound analyze` reads.
package observe

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/internal/scrub"
)

// Multi returns an Observer that passes every event to each of obs in
// turn; nil entries are skipped. A CallObserver among them still gets its
// per-call observer.
func Multi(obs ...rebound.Observer) rebound.Observer {
	var list multi
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
		}
	}
	return list
}

type multi []rebound.Observer

func (m multi) Observe(e rebound.Event) {
	for _, o := range m {
		o.Observe(e)
	}
}

// ObserveCall implements rebound.CallObserver.
func (m multi) ObserveCall(ctx context.Context) rebound.Observer {
	out := make(multi, len(m))
	for i, o := range m {
		if co, ok := o.(rebound.CallObserver); ok {
			o = co.ObserveCall(ctx)
		}
		out[i] = o
	}
	return out
}

// maxErrorText bounds the error message a record carries.
const maxErrorText = 200

// Slog returns an Observer that writes rebound's events to logger:
//
//   - "rebound.attempt" (Debug): a failed attempt.
//   - "rebound.retry" (Info): a retry scheduled: target, attempt, kind,
//     status, error_type, error_code, wait_ms, waited_ms, budget_left,
//     error.
//   - "rebound.hedge" (Info): a hedge started beside a slow attempt:
//     target, attempt, elapsed_ms, budget_left.
//   - "rebound.call" (Debug if it succeeded at once, Info if it succeeded
//     after retries, Warn if it gave up): target, attempts, succeeded,
//     waited_ms, elapsed_ms; on failure also kind, status, error_type,
//     error_code, reason and error.
//   - "rebound.restart" (Warn): the server behind target went down and is
//     started again: target, start, wait_ms, error (why it went down).
//   - "rebound.breaker" (Warn if it opened, Info otherwise): target's
//     breaker changed state: target, state; for an opening, wait_ms (the
//     cool-down, when the breaker says) and error (why, when known).
//   - "rebound.cache" (Info for a hit, Warn for a stale answer): an answer
//     served from rebound.Transport's Cache: target, served ("hit" or
//     "stale"), age_s, elapsed_ms; for a stale one, served after the call
//     gave up, also attempts, reason and error (the failure it stands in
//     for).
func Slog(logger *slog.Logger) rebound.Observer {
	return rebound.ObserverFunc(func(e rebound.Event) {
		ctx := context.Background()
		switch {
		case e.Type == rebound.EventAttempt && e.Err == nil:
			level := slog.LevelDebug
			if e.Attempt > 1 {
				level = slog.LevelInfo
			}
			logger.LogAttrs(ctx, level, "rebound.call", slog.String("target", e.Target), slog.Int("attempts", e.Attempt),
				slog.Bool("succeeded", true), ms("waited_ms", e.Waited), ms("elapsed_ms", e.Elapsed))
		case e.Type == rebound.EventAttempt:
			if logger.Enabled(ctx, slog.LevelDebug) {
				attrs := append([]slog.Attr{slog.String("target", e.Target), slog.Int("attempt", e.Attempt)}, failure(e.Err)...)
				logger.LogAttrs(ctx, slog.LevelDebug, "rebound.attempt", attrs...)
			}
		case e.Type == rebound.EventRetry:
			attrs := []slog.Attr{slog.String("target", e.Target), slog.Int("attempt", e.Attempt), slog.String("kind", e.Verdict.Kind.String()),
				ms("wait_ms", e.Wait), ms("waited_ms", e.Waited)}
			if e.BudgetLeft >= 0 {
				attrs = append(attrs, slog.Float64("budget_left", e.BudgetLeft))
			}
			logger.LogAttrs(ctx, slog.LevelInfo, "rebound.retry", append(attrs, failure(e.Err)...)...)
		case e.Type == rebound.EventHedge:
			attrs := []slog.Attr{slog.String("target", e.Target), slog.Int("attempt", e.Attempt), ms("elapsed_ms", e.Elapsed)}
			if e.BudgetLeft >= 0 {
				attrs = append(attrs, slog.Float64("budget_left", e.BudgetLeft))
			}
			logger.LogAttrs(ctx, slog.LevelInfo, "rebound.hedge", attrs...)
		case e.Type == rebound.EventGiveUp:
			attrs := []slog.Attr{slog.String("target", e.Target), slog.Int("attempts", e.Attempt), slog.Bool("succeeded", false),
				slog.String("kind", e.Verdict.Kind.String()), slog.String("reason", e.Reason.String()),
				ms("waited_ms", e.Waited), ms("elapsed_ms", e.Elapsed)}
			logger.LogAttrs(ctx, slog.LevelWarn, "rebound.call", append(attrs, failure(e.Err)...)...)
		case e.Type == rebound.EventRestart, e.Type == rebound.EventBreaker:
			health(ctx, logger, e)
		case e.Type == rebound.EventCacheHit, e.Type == rebound.EventCacheStale:
			cached(ctx, logger, e)
		}
	})
}

// health writes the record of an event about a target's health outside
// any call: a restart, or a breaker's change.
func health(ctx context.Context, logger *slog.Logger, e rebound.Event) {
	if e.Type == rebound.EventRestart {
		attrs := []slog.Attr{slog.String("target", e.Target), slog.Int("start", e.Attempt), ms("wait_ms", e.Wait)}
		logger.LogAttrs(ctx, slog.LevelWarn, "rebound.restart", append(attrs, failure(e.Err)...)...)
		return
	}
	attrs := []slog.Attr{slog.String("target", e.Target), slog.String("state", e.State)}
	level := slog.LevelInfo
	if e.State == "open" {
		level = slog.LevelWarn
		if e.Wait > 0 {
			attrs = append(attrs, ms("wait_ms", e.Wait))
		}
	}
	logger.LogAttrs(ctx, level, "rebound.breaker", append(attrs, failure(e.Err)...)...)
}

// cached writes the record of an answer served from a cache.
func cached(ctx context.Context, logger *slog.Logger, e rebound.Event) {
	attrs := []slog.Attr{slog.String("target", e.Target), slog.String("served", "hit"),
		slog.Int64("age_s", int64(e.Age/time.Second)), ms("elapsed_ms", e.Elapsed)}
	if e.Type == rebound.EventCacheHit {
		logger.LogAttrs(ctx, slog.LevelInfo, "rebound.cache", attrs...)
		return
	}
	attrs[1] = slog.String("served", "stale")
	attrs = append(attrs, slog.Int("attempts", e.Attempt), slog.String("reason", e.Reason.String()))
	logger.LogAttrs(ctx, slog.LevelWarn, "rebound.cache", append(attrs, failure(e.Err)...)...)
}

func ms(key string, d time.Duration) slog.Attr {
	return slog.Float64(key, float64(d)/float64(time.Millisecond))
}

// failure describes err for a record: its HTTP status, the provider's
// error type and code, and a bounded message.
func failure(err error) []slog.Attr {
	if err == nil {
		return nil
	}
	var attrs []slog.Attr
	var herr *rebound.HTTPError
	if errors.As(err, &herr) {
		attrs = append(attrs, slog.Int("status", herr.StatusCode))
	}
	if typ, code := rebound.ErrorCode(err); typ != "" || code != "" {
		if typ != "" {
			attrs = append(attrs, slog.String("error_type", typ))
		}
		if code != "" {
			attrs = append(attrs, slog.String("error_code", code))
		}
	}
	// rebound's own errors are scrubbed of the request's credentials; an
	// error the caller's function built is scrubbed here of anything
	// shaped like a key.
	msg, whole := (scrub.Secrets{}).Cut(err.Error(), maxErrorText)
	if !whole {
		msg += "…"
	}
	return append(attrs, slog.String("error", msg))
}
