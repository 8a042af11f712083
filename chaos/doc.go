// Package chaos provides a fault-injecting HTTP server for exercising retry
// logic.
//
// A [Server] is an [http.Handler] that stands in for a flaky upstream such as
// a model API. What a request asks for has no bearing on its outcome, which
// is chosen by a mode: always succeed, fail at random, be down, reject the
// request, rate-limit with a wait hint, answer slowly, drop the connection,
// fail the way a model provider does when it is overloaded, out of quota or
// given too long a prompt, break off a stream midway, or lose the reply to a
// call that has done its work; or answer a prompt with a text of its own,
// delivered, delayed, cut and continued as the request asks. rebound's benchmark and tests serve it with
// [net/http/httptest] or a plain [http.Server] and point a client at it.
//
// # Modes
//
//   - [ModeOK]: 200.
//   - [ModeRandom]: fail with probability [Config.FailRate] (35% by default);
//     a failure is 429 Too Many Requests 60% of the time, 503 Service
//     Unavailable 30% and 500 Internal Server Error 10%.
//   - [ModeDown]: 503.
//   - [ModeBadRequest]: 400, a failure no retry can fix.
//   - [ModeRetryAfter]: 429 with a wait hint of [Config.RetryAfter].
//   - [ModeSlow]: 200 after [Config.SlowDelay], or nothing at all if the
//     client goes away first.
//   - [ModeReset]: the connection is closed without a response.
//   - [ModeOverload]: the provider is overloaded: 529 in the plain and
//     anthropic profiles, 503 in the openai and gemini ones. Served on a
//     listener from [NewListener], the 529 says "529 Site is overloaded";
//     net/http alone writes "529 status code 529".
//   - [ModeQuota]: 429 for an exhausted quota or spend limit, which a prompt
//     retry does not fix.
//   - [ModeContext]: the prompt is longer than the model takes: 400, or 413
//     in the plain profile. No retry can fix it.
//   - [ModeStreamCut]: a request that asks for a stream gets 200 and a
//     stream that, with probability [Config.FailRate], breaks off before its
//     end (see Broken streams). Any other request is answered as in ok mode.
//   - [ModeLostReply]: every request performs an action, and with
//     probability [Config.FailRate] its reply is lost (see Lost replies).
//   - [ModeText]: 200 with an answer that depends only on the seed and the
//     prompt, streamed in pieces if the request asks for a stream, which
//     the request's headers can delay, stall and cut, and which a later
//     request can continue (see Text mode).
//
// A request uses [Config.Mode] unless it names a mode of its own, in the
// [HeaderMode] header or, failing that, the [QueryMode] query parameter. A
// request naming an unknown mode gets 400 with an error body naming it.
//
// # Determinism
//
// Every request other than a control request is given a sequence number: 0,
// 1, 2, … in order of arrival. The outcome of request n in random, stream-cut
// or lost-reply mode, whether it fails and how, is a pure function of
// [Config.Seed] and n, so a run that sends its requests one after another
// sees the same outcomes every time, and over many requests the failure rate
// and the mix of failures approach the configured ones. Concurrent requests
// race for sequence numbers, so which request gets which outcome is then up
// to the scheduler, but when all of them are in the same mode the outcomes
// of the first N, taken together, are still fixed.
// [Server.Reset] starts the sequence over. The profile a request is answered
// in changes the words of its outcome, never the outcome.
//
// # Profiles
//
// A profile is the wire format the server answers in. [ProfilePlain], the
// default, has bodies of the server's own. The others answer like a model
// provider, closely enough for the provider's official SDK to parse both
// successes and errors:
//
//   - [ProfileOpenAI]: a path ending in /responses gets a Responses API
//     object; any other path a chat completion. Errors are
//     {"error":{"message":…,"type":…,"param":…,"code":…}}.
//   - [ProfileAnthropic]: every path gets a Messages API message. Errors are
//     {"type":"error","error":{"type":…,"message":…,"details":…},"request_id":…}.
//   - [ProfileGemini]: every path gets a GenerateContentResponse, streamed
//     when the path contains :streamGenerateContent. Errors are
//     {"error":{"code":…,"message":…,"status":…,"details":[…]}}, with a
//     google.rpc.QuotaFailure among the details of a 429.
//
// The openai and anthropic profiles stream their success as server-sent
// events, in the provider's event sequence, when the JSON request body has
// "stream": true. The server looks at no more than the first MiB of a
// request's body; a body it cannot parse as JSON asks for no stream and has
// no prompt text. A success names the model the request body names, if any
// (for gemini, the model in the path), and says "Hello from chaos." with
// the token usage described under Token usage. Every failure uses the
// provider's status, error type and message for its kind of trouble. The
// openai and anthropic profiles send a request id header and, with a success
// and in retryafter mode, the provider's rate-limit headers.
//
// A request uses [Config.Profile] unless it names a profile of its own in the
// [HeaderProfile] header. A request naming an unknown profile gets 400 with a
// plain error body naming it.
//
// # Broken streams
//
// In stream-cut mode a request that asks for a stream gets 200 and the
// stream of its profile: in openai and anthropic one that says "stream":
// true, in gemini one to a :streamGenerateContent path. The plain profile,
// which streams in no other mode, answers a JSON body with "stream": true
// with one data: {"delta":…} event per piece of text and a closing
// data: [DONE].
//
// With probability [Config.FailRate] the stream breaks. It sends the events
// that open it whatever happens (OpenAI's chunk with the role; the Responses
// API's response.created, response.in_progress, response.output_item.added
// and response.content_part.added; Anthropic's message_start,
// content_block_start and ping), then K of its three pieces of text, then,
// as picked half the time each, either
//
//   - the provider's in-band error event, after which the body ends without
//     the events that close the stream, or
//   - nothing: the connection is aborted, so that the client sees the body
//     end unexpectedly rather than cleanly.
//
// K is [Config.CutAfter], or the whole number in the request's
// [HeaderCutAfter] header (a malformed value gets 400; other modes ignore
// the header). A K of three or more breaks the stream after its last piece
// of text, before the events that finish it: a broken stream never sends a
// finish reason, a stop event, usage or a terminator such as [DONE]. The
// in-band error events are, profile by profile:
//
//	# plain
//	data: {"error":{"message":"chaos: injected stream error","type":"chaos_injected"}}
//
//	# openai, chat completions
//	data: {"error":{"message":"The server had an error while processing your request.","type":"server_error","param":null,"code":null}}
//
//	# openai, Responses API, N being the event's place in the stream
//	event: error
//	data: {"type":"error","code":"server_error","message":"The server had an error while processing your request.","sequence_number":N}
//
//	# anthropic
//	event: error
//	data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}
//
//	# gemini
//	data: {"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}
//
// # Text mode
//
// Text mode is for testing what a client does with a stream's text: how it
// joins a stream cut after some content with a second one that continues
// it, and how it guards against a stream that is slow to start or stalls.
//
// The answer is [AnswerText] of [Config.Seed] and the text of the
// request's first user message: 40 to 80 words of plain ASCII text in
// sentences, mostly separated by single spaces, some by two spaces or a
// newline. It depends on nothing else, not on the sequence number, so a
// retry or a continuation gets the same answer. The message is found in
// the request body's "messages" (chat completions, Anthropic and plain),
// "input" (the Responses API, a string or a list of messages) or
// "contents" (Gemini, where the role "model" is the assistant); a
// message's content is a string or a list of parts whose text parts are
// joined. A request with no user message is answered as if it had an
// empty one.
//
// A request that asks for a stream, by the rules of stream-cut mode (see
// Broken streams), gets 200 and a stream in its profile's format: the
// events that open it, then one content event per piece of text, a piece
// being one to three words, then the events that end it (the finish
// reason, usage and [DONE] of a chat completion; the content_block_stop,
// message_delta with end_turn and message_stop of Anthropic; and so on;
// in gemini the last piece carries the finish reason and usage). Each
// piece starts with the whitespace before its first word and ends with
// its last word and any punctuation, so a stream cut after a piece has
// delivered text without trailing whitespace. Any other request gets the
// text whole as the profile's success; in the plain profile that is
// {"ok":true,"request":n,"text":…}. Token usage is counted as in any other
// mode (see Token usage). The bedrock profile never streams.
//
// Four request headers shape a stream. Other modes ignore them; in text
// mode a malformed value gets 400, stream or not, and a request that asks
// for no stream otherwise ignores them. Offsets
// N are whole numbers of bytes counted from the start of the full answer,
// whatever part of it the stream carries.
//
//   - [HeaderCutAt]: N cuts the stream after the piece of text that brings
//     the text delivered to N bytes or more; N = 0 cuts it before its
//     first piece, and N beyond the answer never cuts it.
//   - [HeaderCutHow]: how the stream is cut: abort (the default) aborts
//     the connection, as stream-cut mode does, so that the client sees the
//     body end unexpectedly; close ends the body cleanly but without any of
//     the events that end the stream, a silent truncation; error sends the
//     profile's in-band error event (see Broken streams), then ends the
//     body.
//   - [HeaderFirstTokenDelay]: a duration such as 300ms to wait between
//     the opening events and the first piece of text.
//   - [HeaderStall]: N:D, such as 120:2s, waits D after the piece of text
//     that brings the text delivered to N bytes or more (before the first
//     piece if N is 0), then goes on. A stall at the piece a cut comes
//     after comes before the cut.
//
// Waits use timers, so they run in virtual time in a testing/synctest
// bubble whose client calls the server in memory, and end early, with the
// handler, if the client goes away.
//
// A request continues the answer if the last assistant message of its
// conversation, wherever it is (OpenAI clients follow it with a user
// message asking to continue), has a text that, with trailing whitespace
// trimmed, is a non-empty prefix of the answer. The trimming follows
// Anthropic, which refuses an assistant prefill ending in whitespace. Such
// a request is answered with the rest of the answer: everything after the
// trimmed prefix, in a stream with its full opening and end. So the
// trimmed prefix followed by the rest is the answer, byte for byte; if the
// prefill had trailing whitespace, the rest begins with the whitespace the
// trimming removed, and the untrimmed prefill followed by the rest is not
// the answer. The rest is sent in the answer's own pieces, the first cut
// short if the prefix ends within one, so offsets mean the same as in the
// first request: a continuation that starts before N is cut, or stalled,
// at the same place as the stream it continues, and one that starts at N
// or beyond is neither. [Stats.Continuations] counts continuations; an
// assistant message that is no prefix of the answer is just conversation.
//
// # Token usage
//
// A success reports the tokens its request used, counted by one simple
// tokenizer, the same in every profile and mode: a token per 4 bytes of
// text, rounded up.
//
//   - Input tokens are ceil(B / 4), B being the number of UTF-8 bytes of
//     the request's prompt text: the text of its messages (the "messages"
//     of chat completions, Anthropic and plain, whose content is a string
//     or parts; the Responses API's "input", a string or items; Gemini's
//     "contents" parts) and the system's (Anthropic's "system", the
//     Responses API's "instructions", Gemini's "systemInstruction"). Parts
//     other than text count for nothing. B is never more than the body's
//     length, so a client that estimates ceil(body bytes / 4) never counts
//     fewer input tokens than the server.
//   - Output tokens are ceil(bytes of the answer's text / 4): 5 for
//     "Hello from chaos.". A request with an output cap ("max_tokens",
//     "max_completion_tokens", the Responses API's "max_output_tokens",
//     Gemini's "generationConfig": {"maxOutputTokens": …}; the largest, if
//     it names several, and none if one is negative) gets no more than 4 ×
//     cap bytes of the answer, cut
//     wherever that falls, even within a word, and the provider's finish
//     reason for it: "length" in chat completions; in the Responses API the
//     status "incomplete", with incomplete_details {"reason":
//     "max_output_tokens"}, ending a stream with response.incomplete;
//     "max_tokens" in Anthropic and Bedrock; "MAX_TOKENS" in Gemini. In
//     text mode the cap applies to the text a request is served, the rest
//     of the answer in a continuation.
//   - A chat completion (openai, azure and local profiles) that asks for
//     "n" answers, and a Gemini request that asks for
//     generationConfig.candidateCount, gets that many (at most 128), each
//     the same text, each billed. Anthropic, the Responses API and the
//     plain profile give one.
//   - A Gemini request with a thinking budget
//     (generationConfig.thinkingConfig.thinkingBudget, at most 32768) is
//     billed all of it as thought tokens, beyond its output cap, as
//     Gemini's documentation counts them, and reports them in
//     thoughtsTokenCount.
//   - A request that refers to context the provider keeps
//     ("previous_response_id", "conversation", a stored prompt: a "prompt"
//     object, Gemini's "cachedContent") is billed the number of input
//     tokens its [HeaderContextTokens] header says (a malformed value gets
//     400; none, nothing) beyond its prompt's.
//
// These fields are read as the most generous of the servers that parse
// them would read them: Gemini's in either spelling (maxOutputTokens or
// max_output_tokens, generationConfig or generation_config), keys matched
// whatever their case, as Go's encoding/json matches them, and a field
// named more than once, or in several spellings, taken at its largest. A
// field that is not a number is no cap or count; a body that is not JSON
// names none, and one with a field of the wrong type elsewhere has no
// prompt text but keeps them.
//
// Each profile reports them where its provider does: a chat completion's
// usage (prompt_tokens, completion_tokens, total_tokens), in a stream in a
// last chunk when stream_options.include_usage is true; a finished Responses
// API response's usage (input_tokens, output_tokens, total_tokens); an
// Anthropic message's usage, in a stream input_tokens in message_start and
// output_tokens in message_delta; Gemini's usageMetadata (promptTokenCount,
// candidatesTokenCount, totalTokenCount), in a stream on the last response;
// Bedrock's usage (inputTokens, outputTokens, totalTokens). The plain
// profile reports none. Each also reports the tokens read from the
// provider's prompt cache, and written into it, in its own fields: zero,
// unless the server keeps a prompt cache (see Prompt cache).
//
// The server counts what it billed in [Stats], in all and by tally, its
// input tokens by how they were billed: read afresh, read from the prompt
// cache, written into it. A request counted as 200 is billed its input
// tokens and the output tokens of the answer text it sent: the whole
// answer, or, in a stream, the pieces sent before the stream was cut or
// its client went away, although a cut stream reports no usage. A plain
// success outside text mode and a reply of lost-reply mode carry no answer
// text, and a slow request whose client leaves before its answer is sent
// none: they are billed their input tokens only. A failure, a dropped
// connection and a rejected request are billed nothing. A request is
// tallied under its [HeaderTally] header ("" if it has none) and its
// model: the body's "model", or in the gemini profile the model in the
// path, "" if none. The server keeps at most [MaxTallies] distinct pairs
// of them, and neither may be longer than [MaxTallyKey] bytes; requests
// beyond those bounds are tallied together under the key [TallyOverflow]
// and the model "".
//
// # Prompt cache
//
// With [Config.PromptCache] the server caches prompts as providers do, so
// that a test sees what retries, fallbacks and key rotation do to an
// agent's bill. The rule, kept simple:
//
//   - A prompt is cut into prefixes at its messages: the system prompt
//     and tools (Anthropic's "system", the Responses API's
//     "instructions", Gemini's "systemInstruction"; "tools", Bedrock's
//     "toolConfig"), then the conversation up to each of its messages
//     (an OpenAI chat's system message is its first). A prefix's tokens
//     are counted as input tokens are (see Token usage); parts other
//     than text neither count nor tell two prefixes apart, nor does
//     anything else in the body.
//   - The cache is kept per API key (read as under Per-key limits;
//     requests without one share a cache) and model (the one a request
//     is tallied under). A request never reads what another key, or
//     another model, wrote.
//   - A request reads the longest of its prefixes that the cache holds
//     and that is at least [MinCacheTokens] (1024) long, and writes every
//     one of its prefixes that long: it is billed the read prefix's
//     tokens as read and the rest of its prompt as written. A prompt
//     under 1024 tokens is never cached.
//   - A prefix lives [Config.CacheTTL] after it was last written or read
//     (read, it is written again), on the server's clock, so in virtual
//     time in a testing/synctest bubble. The cache holds at most
//     [MaxCacheEntries] prefixes of all keys and models, forgetting the
//     least recently used first, and [Server.Reset] empties it.
//   - Only a success reads and writes it: a failure, a rejected request
//     and lost-reply mode's replies touch nothing; a stream cut midway
//     has read and written as its whole answer would. The plain profile,
//     which reports no usage, caches nothing, and the context a
//     [HeaderContextTokens] header adds is billed as input read afresh.
//
// Each dialect reports the counts in its own fields, those of the usage
// table the rest of rebound reads them by:
//
//   - chat completions (openai, azure, local):
//     prompt_tokens_details.cached_tokens, part of prompt_tokens; the
//     Responses API: input_tokens_details.cached_tokens, part of
//     input_tokens;
//   - anthropic: cache_read_input_tokens and cache_creation_input_tokens,
//     apart from input_tokens, every write a five-minute one in
//     cache_creation (ephemeral_5m_input_tokens; ephemeral_1h_input_tokens
//     is 0), whatever the TTL; in a stream, in message_start;
//   - gemini: usageMetadata.cachedContentTokenCount, part of
//     promptTokenCount, left out while 0;
//   - bedrock: cacheReadInputTokens and cacheWriteInputTokens, apart from
//     inputTokens, left out while 0.
//
// OpenAI and Gemini report no cache write and bill none: what a request
// writes is reported, and billed, as input there. [Stats] counts the
// tokens read and written apart from the input read afresh, in all and by
// tally, as the answers reported them, so that a test can price the
// provider's bill and compare it with what a client settled.
//
// # Lost replies
//
// Lost-reply mode stands for a tool endpoint with side effects. Every
// request performs an action, numbered 1, 2, … since the server was created
// or last reset, and is answered 200 with, in every profile,
//
//	{"ok":true,"action":a}
//
// With probability [Config.FailRate] the reply is lost after the action is
// done: half the time the connection is dropped, as in reset mode; the other
// half the reply comes only after [Config.SlowDelay], which a client's
// timeout is expected to cut short, and never if the client goes away first.
//
// A request with an Idempotency-Key header ([HeaderIdempotencyKey]) performs
// an action only the first time the server sees its key, and the server
// records the action's number under the key. A later request with the key
// performs nothing and is answered from the record; its reply may be lost
// too, by the same rule as any other. Requests without the header always
// perform a new action. The server remembers the most recent 16384 keys,
// forgetting the oldest first, and [Server.Reset] forgets them all.
//
// # Wait hints
//
// A failure carries a wait hint in retryafter mode, in every mode if
// [Config.HintEveryFailure] is set, and whenever the request has a
// [HeaderRetryAfter] header, whose whole number of seconds then replaces
// [Config.RetryAfter] for that request (a malformed value gets 400). Any
// other failure, random ones included, leaves the client to choose its own
// backoff. A hint of N seconds is sent as the provider sends it:
//
//   - plain and anthropic: a Retry-After: N header;
//   - openai: Retry-After: N and retry-after-ms: N×1000 headers;
//   - gemini: a google.rpc.RetryInfo entry in the error details, with a
//     retryDelay of "Ns", and no header.
//
// # Responses
//
// All bodies are JSON, except streams. In the plain profile a success is
//
//	{"ok":true,"request":n}
//
// where n is the request's sequence number (a success in lost-reply mode is
// the one shown under Lost replies). A failure has the shape of a
// typical model-API error, with the mode that produced it as the code:
//
//	{"error":{"message":"chaos: injected 503 Service Unavailable","type":"chaos_injected","code":"down"}}
//
// # Per-key limits
//
// With [Config.KeyRPM] or [Config.KeyTPM] set, each API key the server
// sees (Authorization: Bearer, x-api-key, x-goog-api-key) is held to that
// many requests, or input tokens, per [Config.KeyWindow]: a window of a
// key starts with its first request after the last one ended, as a
// provider's limits reset. A request past a limit fails with the
// profile's rate-limit 429 (whatever the mode would have made of it) and
// a wait hint until the window ends; every answer to a request with a key
// carries the profile's rate-limit headers for that key (its limits, what
// is left and when the window ends; the openai, azure and anthropic
// profiles have them). A key that starts with one of
// [Config.KeysOutOfQuota] gets the profile's quota 429 every time. The
// counts of each key are in [Stats].Keys under [KeyLabel], a hash of the
// key that never shows it, with the most any one window admitted, so that
// a test can check that no key went past its limit.
//
// # Control endpoints
//
// Two paths are answered by the server itself, whatever the mode, and are
// neither counted nor given a sequence number:
//
//   - GET [StatsPath] returns [Stats] as JSON.
//   - POST [ResetPath] calls [Server.Reset] and answers 204 No Content.
//
// Any other method on these paths gets 405 Method Not Allowed with an Allow
// header.
package chaos
