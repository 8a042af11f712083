// Package cache keeps the answers of LLM APIs, so that a request asked
// again can be answered without a provider: at once, when the operator
// wants a plain cache, or, the case it is built for, when every provider
// of a fallback chain has failed. One of the articles rebound grew from
// ends its fallback "switch to a smaller model, or return a cached
// result"; this package is the second half of that sentence, in the way
// HTTP caches serve stale-if-error (RFC 5861): an old answer, marked as
// old, in place of an error.
//
// A Cache keys an answer by what determines it: the Scope (the tenant,
// the route and, where a client's own key reaches the provider, a hash of
// that key), the method, path and query, the request headers that change
// an answer (anthropic-version, anthropic-beta, openai-beta), whether the
// answer is streamed, and the JSON body with its keys sorted and its
// white space dropped. A body that is not JSON, or whose objects repeat a
// key (which parsers read differently), is not cached.
//
// It keeps only what is whole: an answer with a 200 status, in no content
// coding (a gzip the caller asked for itself), whose body was read to its
// end, not short of its Content-Length, and, when it is JSON, a whole
// document that is neither an error (which some providers send with a
// 200) nor a response that failed or has not finished (a
// "status" of failed, incomplete, queued, in_progress or cancelled); a
// streamed answer only once it ended with the provider's own end ("data:
// [DONE]", message_stop, response.completed, a Gemini finishReason), every
// event of it, to be replayed as it came. It never keeps or serves the
// answer to a request with side effects (rebound.ProviderSideEffects, a
// context marked by rebound.WithSideEffects, an Idempotency-Key), nor to
// one that is not a POST: a GET reads the state of something that changes
// (a background response, a batch), which a kept answer would freeze. A
// request may opt out with Cache-Control: no-store (nothing kept) or
// no-cache (nothing served; Pragma: no-cache too, without a
// Cache-Control), and max-age=N serves no hit older than N seconds.
//
// There are two ways to serve (Config.Serve). OnFailure sends every
// request on as before and serves a stored answer no older than MaxStale
// only when the providers failed (Failed): a 5xx, a 429 after its
// retries, a connection refused or reset, a timeout, an open breaker, no
// slot of a limit; never in place of a provider's other 4xx, nor of a
// guard's refusal such as a spend cap, which the caller must see. Always
// serves an answer younger than TTL without asking any provider, and
// holds to OnFailure beyond it up to MaxStale.
//
// An answer served says so: its header X-Rebound-Cache is "hit" or
// "stale" and its Age the seconds since it was stored, so that an agent
// that must not act on an old answer can tell.
//
// The Store is where the answers live: Memory, in the process, bounded in
// bytes with the least recently used answer evicted first; or the Redis
// store of the redis module, shared by every replica. Keys are hashes and
// answers are bytes: neither reaches a log.
package cache
