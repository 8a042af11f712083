// Package proxy is the handler of "rebound proxy": a reverse proxy that
// puts rebound's engine in front of agents written in any language. It
// speaks each provider's own API (OpenAI's chat completions and responses,
// Anthropic's messages, Gemini's generateContent, streaming or not), so
// that a client changes only its base URL and turns its SDK's retries off.
//
// A request is read whole (up to a cap: a larger one gets a 413 shaped as
// its dialect's errors are; one that stalls for BodyStall, or takes over
// its timeout, a 408), matched to a route by its path and model, and sent,
// path (escapes kept), query and body unchanged, through a
// rebound.Transport over a ratelimit.Transport: classified, retried under
// the route's policy, paced by the limits the upstream's headers announce,
// held to an adaptive limit of requests in flight (a stream counts until
// its first content; a request that finds no slot within MaxQueueWait is
// never sent there: it goes to the route's next upstream if one has a slot
// free at once, else gets a 503 with Retry-After), with a retry budget per
// upstream. The body is kept once: its model is found in place, and it is
// sent, renamed or not, from the bytes read. The bodies in flight together
// hold at most Options.MaxBodyMemory, reserved as their bytes arrive (the
// proxy allocates at most twice what has come, never a declared length
// ahead) and given back as soon as the upstream has answered; a request
// that finds it spent waits BodyMemoryWait at most in all, then gets a 503
// with Retry-After. Memory goes to the oldest body waiting, and when the
// bodies waiting for more hold all of it the newest gives up at once:
// under load bodies go on rather than wait each other out.
//
// What the proxy cannot route truthfully it refuses in the dialect, with
// a 400: a body sent as JSON (by its Content-Type, or that begins as an
// object or array does) that is not strict JSON (RFC 8259: UTF-8
// throughout, no NaN or Infinity, nothing after the value), or whose
// top-level keys hold more than one that a common parser would take for
// "model" (escaped, in another case, cut at a NUL), or one that is not
// written "model" ("Model": Go's encoding/json takes it, Python's json
// does not), or whose model is not a string, holds a lone surrogate, or
// is over MaxModel bytes (it becomes a breaker's key, a metric's label, a
// log field); the proxy would route by one reading, the upstream serve
// another, past a route's model. A body that is not JSON (a file upload's
// form, a compressed body) goes as it came, the upstream's 400 the truth,
// but names no model: only a route that names none takes it. Refused too: a path with
// "." or ".." segments (they would leave the upstream's base path, with
// its key), and a protocol upgrade (a 501: websockets, the Realtime API
// among them, are not proxied). The client's Accept-Encoding is not passed on:
// the transport asks for gzip and decodes it, so that every answer is read
// (classified, scrubbed, its tokens counted) and reaches the client
// uncompressed. Event streams are looked into up to their first content,
// so that one that fails before it is retried where the client sees
// nothing; after it, the bytes go to the client as they come, flushed at
// once, and a stream that breaks reaches the client broken as it broke;
// one the provider ends with its error event reaches it with that event,
// then ends cleanly, so that the client's SDK raises the provider's error.
//
// Only model calls are retried whatever came of an attempt: the paths
// rebound.ProviderSideEffects knows (chat completions, completions,
// Responses, embeddings, moderations, Anthropic's messages, Gemini's
// generateContent and the like, unless they add to a stored conversation
// or have the provider call an MCP server), GETs, and a route's
// safe_paths. Any other
// request (a file, a batch, a fine-tuning job, an upload, a vector store,
// an assistant, a thread's run, a path the proxy does not know) may create
// something at the provider: after an attempt that may have reached the
// upstream (a connection dropped once the request was written, a timeout,
// a 500) it is not sent again, to that upstream or a fallback, and the
// client gets a 502 that says so. It is still retried, or sent to a
// fallback, when the attempt provably never left (the connection was
// refused or never made) or the upstream refused it with a 429, 503 or
// 529; and like a model call when the client sends an Idempotency-Key,
// but only by its own upstream: the key means nothing to a fallback, which
// a request with side effects reaches only if no attempt was made before.
//
// The breaker of each upstream and model is there for a dead upstream, not
// a flaky one: with nowhere else to go, refusing a call that would have
// had two chances in three is worse than making it. So it opens on a high
// failure rate over a window with enough calls (RecommendedBreaker), and a
// rate limit that came with a server wait does not count (rebound's rule,
// rebound.OutcomeOf): waiting it out is the limiter's and the retry
// loop's business.
//
// Breakers, quota cool-downs and metrics are kept per upstream and model
// label, not per name the client sends: a model has a label of its own
// when the config names it (a route's, a fallback's) or when it is among
// the first MaxLearnedModels an upstream answered with a 2xx; every other
// name is OtherModel, one breaker and one series per upstream, and only
// the access log carries it. Made-up names thus share a breaker rather
// than evict those of real models, and cannot open a real model's once it
// has been answered.
//
// A route's fallbacks are other upstreams of its dialect, each with the
// model to ask it for; the JSON body's "model" (or a Gemini path's) is
// renamed, every other byte kept. A route is a fallback.Chain, whose rules
// decide: the proxy moves on when an upstream's breaker is open, when it
// had no slot for the request in time, when it is overloaded (at once,
// without retrying it), out of quota (and then skips it for a cool-down,
// per upstream and model) or out of retries; a permanent failure is the
// same everywhere and goes back to the client. The last upstream is the
// last resort: tried even while it cools down, its overloads retried, and
// its own answer, failed or not, goes back to the client as it came.
//
// Key pools: an upstream whose config gives "keys_env" (UpstreamConfig.
// KeysEnv) is a pool of keys of one provider, whose limits add up. Each
// key is an upstream of its own in the route's chain, named
// "UPSTREAM/KEYVAR" after the variable that holds it (never its value),
// with its own pace learnt from its own answers' rate-limit headers, its
// own limit on requests in flight, its own breakers and quota cool-downs
// ("UPSTREAM/KEYVAR:MODEL"); the retry budget is the upstream's. The keys
// are one fallback.Target.Pool: per request the chain tries them by the
// headroom their pacers report (ratelimit.Headroom), those cooling down
// last, and a rate-limited answer on one moves on to the next at once;
// the last key tried waits for the server's hint as a lone key would.
//
// A provider keeps its prompt cache per key, so a pool keeps each
// conversation on one key (fallback.Chain.Conversation), unless its
// config says "affinity": "none": the conversation is named by the
// client (prompt_cache_key, user, safety_identifier, metadata.user_id)
// or by a hash of the start of its prompt (the system prompt, the tools,
// the first user message; conversation.go says what exactly), its key is
// chosen by rendezvous hashing over a hash of each key's value, the same
// on every replica, and it stays there while that key can take it at
// once and has half the headroom of the best key. A request of no
// conversation, or of one its body does not name clearly, goes by
// headroom.
//
// Browsers: a proxy that holds a key and asks no token is what a local
// developer server with credentials is, and does what they do. Without
// client tokens it answers only requests for a loopback Host (localhost,
// 127.0.0.0/8, ::1, any port) or one of Options.AllowHosts, so that a web
// page that rebinds its own name to 127.0.0.1 cannot use the key. Tokens
// or not, a request from a web page (an Origin header, or a
// Sec-Fetch-Site that is not same-origin) is answered only from
// Options.AllowOrigins, which alone get CORS headers; an upstream's own
// CORS headers never reach the client, and a pre-flight OPTIONS is
// answered by the proxy, never forwarded. A refused request gets a 403 in
// its dialect. With tokens the Host is not checked: the token stands
// guard, and a proxy behind another server sees that server's names.
//
// Keys: with one upstream and no config, the client's own key passes
// through. Otherwise it does only when the config says so, and then only
// to the route's own upstream, never to a fallback; upstream keys come
// from environment variables, never from a file. Client tokens, compared
// in constant time, stand where a key would (each header an SDK sends its
// key in, or Gemini's ?key=), so a proxy with tokens sends the upstream's
// key instead. An upstream that echoes its key has it scrubbed from the
// response headers and error bodies. Nothing the proxy writes to its log
// carries a header, a body or a prompt, and every error text is scrubbed
// of the keys and tokens it knows and of anything shaped like a key.
//
// Tenants (FileConfig.Tenants, TenantConfig): several agents, teams or
// customers share the proxy, each known by its client tokens and held,
// before anything is sent, to the models it may use (a 403 in the
// dialect otherwise), to its requests_per_minute and tokens_per_minute
// (a wait of TenantMaxWait at most, then a 429 with Retry-After), and to
// its spend cap for a UTC day or month, priced by FileConfig.Prices: each
// attempt is held against the cap under cost.WithCaps' rule and refused,
// never sent, when it could pass it, then settled at the usage its answer
// reports. A refusal is the dialect's own quota error (OpenAI's 429
// insufficient_quota, Anthropic's 402 billing_error, Gemini's 429
// RESOURCE_EXHAUSTED) with x-should-retry: false, naming the cap and when
// it resets. Options.TenantCap and TenantLimiter share caps and limits
// among replicas (rebound proxy --redis); the tokens of Options.Tokens are
// the tenant DefaultTenant.
//
// Config reload: Proxy.Reload returns a Proxy for another config that
// keeps the state of every upstream, key and tenant the config keeps
// (learnt limits, breakers, quota cool-downs, retry budgets, a tenant's
// spend and limits, the status page's figures); serve it in the old one's
// place (an atomic pointer as the server's handler), and requests in
// flight finish on the old one. FileConfig.Version, the first 12 hex
// digits of the SHA-256 of the file, names the config that is live on the
// status page.
//
// MCP servers: a config's FileConfig.MCPServers are served at /mcp/NAME,
// matched after the door and before any route, by the handlers
// Options.MCPServer makes (rebound proxy's are rebound mcp's sessions,
// which this package, standard library only, cannot import). The proxy
// checks the token (401) and the tenant's TenantConfig.MCP (404 for a
// server it is not given), holds a tools/call to the tenant's
// requests_per_minute, reads the body as a model call's (within its
// limits, held in the body memory until answered), and hands the handler
// the caller in the request's context (MCPCallerFrom): the holder a
// session is bound to, and the tools it may use. A reload keeps the
// handler of a server whose config is unchanged; CloseReplaced lets the
// others finish their calls in flight, then closes them, and Close closes
// them all. The Observer a handler is given counts, for the status page,
// the server's calls, restarts and respawn breaker, and the tools/calls
// passed on are counted to their tenant.
//
// The access log (Options.Logger) has a line per request, "msg":"request",
// with always: method, path, route, upstream ("UPSTREAM/KEYVAR" for a key
// of a pool), model (as the client named
// it), attempts, kinds (the verdict of each failed attempt: a list, []
// when the first attempt answered), status and latency_ms; and when there
// is something to say: "stream":true for a streamed answer,
// input_tokens and output_tokens as the answer reported them (an OpenAI
// stream reports none unless the client asks, with
// stream_options.include_usage; input_tokens is every input token, and
// cache_read_tokens and cache_write_tokens, when either is not zero, the
// parts of it read from the provider's prompt cache and written into
// it), tenant (its name, never a token) and
// tenant_cap_usd, cost_usd (what the attempts cost, when priced), cache
// (hit, stale, miss or stored, for a route with a response cache) and
// saved_usd (what an answer served from it would have cost),
// upstreams_tried, skipped (upstreams cooling down), outcome (why the
// proxy answered itself; tenant_spend_cap, tenant_rate_limit and
// tenant_model for a tenant's refusals), broken and error.
package proxy
