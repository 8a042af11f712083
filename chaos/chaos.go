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
// profile reports none.
//
// The server counts what it billed in [Stats], in all and by tally. A
// request counted as 200 is billed its input tokens and the output tokens
// of the answer text it sent: the whole answer, or, in a stream, the pieces
// sent before the stream was cut or its client went away, although a cut
// stream reports no usage. A plain success outside text mode and a reply
// of lost-reply mode carry no answer text, and a slow request whose client
// leaves before its answer is sent none: they are billed their input
// tokens only. A failure, a dropped connection and a rejected request are
// billed nothing. A request is tallied under its [HeaderTally] header (""
// if it has none) and its model: the body's "model", or in the gemini
// profile the model in the path, "" if none. The server keeps at most
// [MaxTallies] distinct pairs of them, and neither may be longer than
// [MaxTallyKey] bytes; requests beyond those bounds are tallied together
// under the key [TallyOverflow] and the model "".
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

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rebound-go/rebound/internal/provider"
)

// Modes a [Server] can run in, as named in [Config.Mode], the [HeaderMode]
// header and the [QueryMode] query parameter.
const (
	ModeOK         = "ok"         // always 200
	ModeRandom     = "random"     // fail with probability FailRate: 60% 429, 30% 503, 10% 500
	ModeDown       = "down"       // always 503
	ModeBadRequest = "badreq"     // always 400
	ModeRetryAfter = "retryafter" // 429 with a wait hint of RetryAfter
	ModeSlow       = "slow"       // 200 after SlowDelay (returns early if the client goes away)
	ModeReset      = "reset"      // drop the connection without a response
	ModeOverload   = "overload"   // provider overloaded: 529 (plain, anthropic) or 503 (openai, gemini)
	ModeQuota      = "quota"      // 429 for an exhausted quota or spend limit
	ModeContext    = "context"    // prompt too long: 400 (413 in the plain profile)
	ModeStreamCut  = "stream-cut" // a stream breaks off with probability FailRate
	ModeLostReply  = "lost-reply" // perform an action, then lose the reply with probability FailRate
	ModeText       = "text"       // a seeded answer to the prompt, streamed in pieces, cut, delayed or continued as asked
)

// modes lists every mode, in the order an unknown-mode error names them.
var modes = []string{
	ModeOK, ModeRandom, ModeDown, ModeBadRequest, ModeRetryAfter, ModeSlow, ModeReset,
	ModeOverload, ModeQuota, ModeContext, ModeStreamCut, ModeLostReply, ModeText,
}

// Profiles a [Server] can answer in, as named in [Config.Profile] and the
// [HeaderProfile] header.
const (
	ProfilePlain     = "plain"     // the server's own bodies
	ProfileOpenAI    = "openai"    // OpenAI's Chat Completions and Responses APIs
	ProfileAnthropic = "anthropic" // Anthropic's Messages API
	ProfileGemini    = "gemini"    // Google's Gemini API
	ProfileAzure     = "azure"     // Azure OpenAI: OpenAI's APIs, Azure's errors
	ProfileBedrock   = "bedrock"   // AWS Bedrock's Converse API
	ProfileLocal     = "local"     // an OpenAI-compatible local server, as llama.cpp's
)

// Request parameters and control paths understood by a [Server].
const (
	// HeaderMode is the request header that picks the mode of one request.
	HeaderMode = "X-Chaos-Mode"
	// QueryMode is the query parameter that picks the mode of one request
	// when the HeaderMode header is absent.
	QueryMode = "chaos_mode"
	// HeaderProfile is the request header that picks the profile of one
	// request.
	HeaderProfile = "X-Chaos-Profile"
	// HeaderRetryAfter is the request header that asks for a wait hint of
	// its value, a whole number of seconds, should the request fail.
	HeaderRetryAfter = "X-Chaos-Retry-After"
	// HeaderCutAfter is the request header that sets, in stream-cut mode,
	// how many pieces of text a breaking stream sends first: a whole number
	// that replaces Config.CutAfter for the request.
	HeaderCutAfter = "X-Chaos-Cut-After"
	// HeaderIdempotencyKey is the request header whose value, in lost-reply
	// mode, names the action a request asks for, so that a retry with the
	// same key does not perform it again.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderCutAt is the request header that cuts, in text mode, a stream
	// after the piece of text that brings the text delivered to its value,
	// a whole number of bytes counted from the start of the full answer.
	HeaderCutAt = "X-Chaos-Cut-At"
	// HeaderCutHow is the request header that says, in text mode, how a
	// stream is cut: abort (the default), close or error.
	HeaderCutHow = "X-Chaos-Cut-How"
	// HeaderFirstTokenDelay is the request header that makes, in text mode,
	// a stream wait its value, a duration such as 300ms, between the
	// events that open it and its first piece of text.
	HeaderFirstTokenDelay = "X-Chaos-First-Token-Delay"
	// HeaderStall is the request header that makes, in text mode, a stream
	// wait D after the piece of text that brings the text delivered to N
	// bytes of the full answer; its value is N:D, such as 120:2s.
	HeaderStall = "X-Chaos-Stall"
	// HeaderContextTokens is the request header that says how many tokens
	// the context the provider keeps holds, for a request that refers to
	// it (previous_response_id, conversation, a stored prompt, Gemini's
	// cachedContent): a whole number, billed as input beyond the prompt's.
	// It is 0 if absent.
	HeaderContextTokens = "X-Chaos-Context-Tokens"
	// HeaderTally is the request header that names the tally a request is
	// counted under in [Stats.Tallies]: any string of up to MaxTallyKey
	// bytes.
	HeaderTally = "X-Chaos-Tally"
	// StatsPath is the control endpoint that reports [Stats] (GET).
	StatsPath = "/chaos/stats"
	// ResetPath is the control endpoint that calls [Server.Reset] (POST).
	ResetPath = "/chaos/reset"
)

// Config configures a [Server]. The zero value is a server in random mode
// failing 35% of requests, with seed 0, answering in the plain profile.
type Config struct {
	// Mode is the mode of requests that do not name one.
	// The default ("") is ModeRandom.
	Mode string

	// FailRate is the probability that a request fails in random mode, that
	// a stream breaks in stream-cut mode and that a reply is lost in
	// lost-reply mode. It must lie in [0, 1]; the default (0) is 0.35.
	FailRate float64

	// Seed seeds the sequence of outcomes of random, stream-cut and
	// lost-reply mode. The default is 0, which is as good a seed as any
	// other.
	Seed uint64

	// RetryAfter is the wait announced by a wait hint, sent in whole
	// seconds, rounded up. It must lie in [0, MaxRetryAfter]; the default
	// (0) is one second.
	RetryAfter time.Duration

	// SlowDelay is how long a request waits before its answer in slow mode,
	// and before a reply that is lost by coming late in lost-reply mode. It
	// must not be negative; the default (0) is one second.
	SlowDelay time.Duration

	// Profile is the profile of requests that do not name one.
	// The default ("") is ProfilePlain.
	Profile string

	// HintEveryFailure makes every failure carry a wait hint of RetryAfter,
	// whatever its mode. The default (false) hints only in retryafter mode
	// and at requests that ask with the HeaderRetryAfter header.
	HintEveryFailure bool

	// CutAfter is how many pieces of text a stream that breaks in
	// stream-cut mode sends before it breaks, for requests without a
	// HeaderCutAfter header; three or more breaks it after the last one. It
	// must not be negative; the default (0) breaks it before the first.
	CutAfter int
}

// Server is a fault-injecting [http.Handler]. Create one with [New]. It is
// safe for concurrent use.
type Server struct {
	cfg        Config // with defaults applied
	retryAfter int64  // RetryAfter in whole seconds, rounded up

	// mu guards next, requests, byStatus, streams, actions, duplicates,
	// keys, keyOrder, continuations, inputTokens, outputTokens and tallies.
	mu         sync.Mutex
	next       uint64              // sequence number of the next request
	requests   int                 // requests served since the last Reset
	byStatus   map[string]int      // as in Stats.ByStatus
	streams    [mishapLate]int     // stream-cut streams by how they ended: mishapNone, mishapInBand, mishapAbort
	actions    uint64              // lost-reply actions performed, the number of the last one
	duplicates int                 // as in Stats.Duplicates
	keys       map[[32]byte]uint64 // action recorded for each remembered key, by its SHA-256
	keyOrder   [][32]byte          // the keys in keys, oldest first

	continuations int // as in Stats.Continuations

	inputTokens  int                // as in Stats.InputTokens
	outputTokens int                // as in Stats.OutputTokens
	tallies      map[tallyID]*Tally // as in Stats.Tallies
}

// MaxRetryAfter is the longest Config.RetryAfter: a year, the longest wait
// hint a client is expected to take at face value. A request's
// HeaderRetryAfter is not bound by it, so that a test can still send an
// absurd hint.
const MaxRetryAfter = 365 * 24 * time.Hour

// maxKeys is how many idempotency keys a server remembers at most.
const maxKeys = 16384

// Stats counts the requests a [Server] has served since it was created or
// last reset. A request is counted, under the outcome chosen for it, when it
// arrives; a slow request whose client goes away is still counted as 200.
// The tokens billed to a request (see Token usage) are counted when its
// answer ends.
//
// The counts of stream-cut, lost-reply and text mode are left out of the
// JSON while zero, so a server that never runs those modes reports only
// requests, by_status, the tokens and the tallies, as in
//
//	{"requests":3,"by_status":{"200":2,"429":1},
//	 "input_tokens":8,"output_tokens":10,
//	 "tallies":{"run-7":{"gpt-x":{"requests":2,"input_tokens":4,"output_tokens":5}},
//	            "":{"gpt-x":{"requests":1,"input_tokens":4,"output_tokens":5}}}}
//
// (on one line). A tally is {"requests":…,"input_tokens":…,"output_tokens":…}
// under its tally key, then its model.
type Stats struct {
	// Requests is the number of requests served, control requests excluded.
	Requests int `json:"requests"`
	// ByStatus counts requests by status code in decimal ("200", "429",
	// ...); dropped connections are counted under "reset". It is never nil.
	// A stream that stream-cut mode breaks counts as 200, as its status
	// went out; a reply lost-reply mode loses by dropping the connection
	// counts under "reset" and one it loses by coming late as 200.
	ByStatus map[string]int `json:"by_status"`

	// StreamsCompleted, StreamsCutInBand and StreamsCutAbort count the
	// streams served in stream-cut mode by how they ended: normally, with
	// the provider's in-band error event, or with the connection aborted. A
	// stream is counted when it ends; streams in other modes and requests
	// not asking for a stream are not counted.
	StreamsCompleted int `json:"streams_completed,omitempty"`
	StreamsCutInBand int `json:"streams_cut_inband,omitempty"`
	StreamsCutAbort  int `json:"streams_cut_abort,omitempty"`

	// Actions is the number of distinct actions performed in lost-reply
	// mode, and Duplicates the number of requests there answered from the
	// record of an earlier request with the same idempotency key.
	Actions    int `json:"actions,omitempty"`
	Duplicates int `json:"duplicates,omitempty"`

	// Continuations is the number of requests in text mode that continued
	// an answer from a prefix of it (see Text mode).
	Continuations int `json:"continuations,omitempty"`

	// InputTokens and OutputTokens are the tokens the server billed, in
	// all (see Token usage).
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	// Tallies counts requests and billed tokens by tally key (the
	// HeaderTally header, "" for none), then by model (the body's "model";
	// in the gemini profile the one in the path; "" for none). Every
	// request counted in Requests is counted in exactly one tally, so the
	// tallies add up to Requests, InputTokens and OutputTokens (unless
	// the server was reset while a request was being answered). It is
	// never nil; see Token usage for its bounds.
	Tallies map[string]map[string]Tally `json:"tallies"`
}

// New returns a server for cfg, or an error if cfg names an unknown mode or
// profile, has a FailRate outside [0, 1] or NaN, a negative duration, a
// RetryAfter beyond MaxRetryAfter or a negative CutAfter.
func New(cfg Config) (*Server, error) {
	if cfg.Mode == "" {
		cfg.Mode = ModeRandom
	} else if !knownMode(cfg.Mode) {
		return nil, unknownModeError(cfg.Mode)
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfilePlain
	} else if profileNamed(cfg.Profile) == nil {
		return nil, unknownProfileError(cfg.Profile)
	}
	switch {
	case math.IsNaN(cfg.FailRate) || cfg.FailRate < 0 || cfg.FailRate > 1:
		return nil, fmt.Errorf("chaos: fail rate %v outside [0, 1]", cfg.FailRate)
	case cfg.RetryAfter < 0:
		return nil, fmt.Errorf("chaos: negative retry-after %v", cfg.RetryAfter)
	case cfg.RetryAfter > MaxRetryAfter:
		return nil, fmt.Errorf("chaos: retry-after %v is beyond a year (want at most %v)", cfg.RetryAfter, MaxRetryAfter)
	case cfg.SlowDelay < 0:
		return nil, fmt.Errorf("chaos: negative slow delay %v", cfg.SlowDelay)
	case cfg.CutAfter < 0:
		return nil, fmt.Errorf("chaos: negative cut-after %d", cfg.CutAfter)
	}
	if cfg.FailRate == 0 {
		cfg.FailRate = 0.35
	}
	if cfg.RetryAfter == 0 {
		cfg.RetryAfter = time.Second
	}
	if cfg.SlowDelay == 0 {
		cfg.SlowDelay = time.Second
	}
	return &Server{
		cfg:        cfg,
		retryAfter: int64((cfg.RetryAfter + time.Second - 1) / time.Second),
		byStatus:   make(map[string]int),
		keys:       make(map[[32]byte]uint64),
		tallies:    make(map[tallyID]*Tally),
	}, nil
}

func knownMode(mode string) bool {
	return slices.Contains(modes, mode)
}

func unknownModeError(mode string) error {
	return fmt.Errorf("chaos: unknown mode %q (want %s)", mode, strings.Join(modes, ", "))
}

// ServeHTTP answers r according to its mode and profile, or serves a control
// endpoint.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case StatsPath:
		if allow(w, r, http.MethodGet) {
			writeJSON(w, http.StatusOK, s.Stats())
		}
		return
	case ResetPath:
		if allow(w, r, http.MethodPost) {
			s.Reset()
			w.WriteHeader(http.StatusNoContent)
		}
		return
	}

	c, rej := s.newCall(r)
	s.admit(c, rej != nil)
	// Deferred, as an aborted stream ends the handler with a panic.
	defer s.bill(c)
	switch {
	case rej != nil:
		c.reject(w, *rej)
		return
	case c.mode == ModeLostReply:
		s.act(w, r, c)
		return
	case c.fault == faultReset:
		drop(w)
		return
	case c.mode == ModeSlow && !s.wait(r.Context()):
		return
	case c.mode == ModeText:
		c.planText(r)
	}
	c.answer(w, r)
}

// newCall reads the mode, profile and wait hint of r. If r names something
// the server does not know, it returns the rejection to answer with and a
// call good enough to answer it in.
func (s *Server) newCall(r *http.Request) (*call, *rejection) {
	c := &call{srv: s, ctx: r.Context(), profile: plain, wait: noHint, req: readRequest(r), answers: 1}
	c.input = c.req.inputTokens()
	c.out = textOutput(successText, successEnds)
	c.tally = tallyID{r.Header.Get(HeaderTally), c.req.Model}
	name := r.Header.Get(HeaderProfile)
	if name == "" {
		name = s.cfg.Profile
	}
	p := profileNamed(name)
	if p == nil {
		return c, &rejection{"chaos_unknown_profile", name, unknownProfileError(name).Error()}
	}
	c.profile = p
	if p == gemini {
		c.tally.model = provider.GeminiModel(r.URL.Path)
	}

	c.mode = r.Header.Get(HeaderMode)
	if c.mode == "" {
		c.mode = r.URL.Query().Get(QueryMode)
	}
	if c.mode == "" {
		c.mode = s.cfg.Mode
	}
	if !knownMode(c.mode) {
		return c, &rejection{"chaos_unknown_mode", c.mode, unknownModeError(c.mode).Error()}
	}

	if v := r.Header.Get(HeaderRetryAfter); v != "" {
		secs, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			msg := fmt.Sprintf("chaos: %s %q is not a whole number of seconds", HeaderRetryAfter, v)
			return c, &rejection{"chaos_bad_retry_after", v, msg}
		}
		c.wait = int64(secs)
	} else if c.mode == ModeRetryAfter || s.cfg.HintEveryFailure {
		c.wait = s.retryAfter
	}

	if v := r.Header.Get(HeaderContextTokens); v != "" {
		n, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			msg := fmt.Sprintf("chaos: %s %q is not a whole number of tokens", HeaderContextTokens, v)
			return c, &rejection{"chaos_bad_context_tokens", v, msg}
		}
		if c.req.asks.kept {
			c.input += int(n)
		}
	}

	if c.mode == ModeStreamCut {
		c.cutAfter = min(s.cfg.CutAfter, len(successChunks))
		if v := r.Header.Get(HeaderCutAfter); v != "" {
			k, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				msg := fmt.Sprintf("chaos: %s %q is not a whole number of events", HeaderCutAfter, v)
				return c, &rejection{"chaos_bad_cut_after", v, msg}
			}
			c.cutAfter = int(min(k, uint64(len(successChunks))))
		}
	}
	if c.mode == ModeText {
		if rej := c.readTextHeaders(r); rej != nil {
			return c, rej
		}
	}
	return c, nil
}

// A fault is the outcome of a request before a profile puts it into words.
type fault int

const (
	faultNone        fault = iota // success
	faultRateLimit                // too many requests
	faultUnavailable              // service unavailable
	faultInternal                 // internal server error
	faultBadRequest               // invalid request
	faultOverload                 // the provider is overloaded
	faultQuota                    // quota or spend limit exhausted
	faultContext                  // prompt too long for the model
	faultReset                    // connection dropped without a response
)

// A mishap is what goes wrong with a reply in stream-cut and lost-reply
// modes, beyond what its status says.
type mishap int

const (
	mishapNone   mishap = iota // the reply arrives whole
	mishapInBand               // the stream ends with the provider's in-band error event
	mishapAbort                // the connection is aborted: mid-stream, or before a lost reply
	mishapLate                 // the reply comes after SlowDelay
)

// admit gives c, a request whose mode and profile are known, its sequence
// number, decides its fault and mishap and counts it. A rejected request is
// a bad request.
func (s *Server) admit(c *call, rejected bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.n = s.next
	s.next++
	c.fault = faultBadRequest
	if !rejected {
		c.fault, c.mishap = s.outcome(c.mode, c.n)
	}
	s.requests++
	key := "reset"
	if c.fault != faultReset {
		key = strconv.Itoa(c.profile.status(c.fault))
	}
	s.byStatus[key]++
	tallyOf(s.tallies, c.tally).Requests++
}

// outcome returns the fault and mishap of request n in the given mode. A
// failure of stream-cut or lost-reply mode is, half the time each, the first
// or the second of its two mishaps.
func (s *Server) outcome(mode string, n uint64) (fault, mishap) {
	switch mode {
	case ModeRandom:
		return randomFaults[s.randomStatus(n)], mishapNone
	case ModeStreamCut, ModeLostReply:
		fail, u := s.draw(n)
		switch {
		case !fail:
			return faultNone, mishapNone
		case mode == ModeStreamCut && u < 0.5:
			return faultNone, mishapInBand
		case mode == ModeStreamCut:
			return faultNone, mishapAbort
		case u < 0.5:
			return faultReset, mishapAbort
		default:
			return faultNone, mishapLate
		}
	}
	return modeFaults[mode], mishapNone
}

// modeFaults gives the fault of every mode but random, stream-cut and
// lost-reply.
var modeFaults = map[string]fault{
	ModeOK:         faultNone,
	ModeSlow:       faultNone,
	ModeDown:       faultUnavailable,
	ModeBadRequest: faultBadRequest,
	ModeRetryAfter: faultRateLimit,
	ModeReset:      faultReset,
	ModeOverload:   faultOverload,
	ModeQuota:      faultQuota,
	ModeContext:    faultContext,
	ModeText:       faultNone,
}

// randomFaults maps the statuses of random mode to their faults.
var randomFaults = map[int]fault{
	http.StatusOK:                  faultNone,
	http.StatusTooManyRequests:     faultRateLimit,
	http.StatusServiceUnavailable:  faultUnavailable,
	http.StatusInternalServerError: faultInternal,
}

// draw reports whether request n fails, with probability FailRate, and for
// a failure returns a number in [0, 1) to pick its kind; both are a pure
// function of the seed and n.
func (s *Server) draw(n uint64) (fail bool, u float64) {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, n))
	if rng.Float64() >= s.cfg.FailRate {
		return false, 0
	}
	return true, rng.Float64()
}

// randomStatus returns the random-mode status of request n, a pure function
// of the seed and n.
func (s *Server) randomStatus(n uint64) int {
	fail, u := s.draw(n)
	if !fail {
		return http.StatusOK
	}
	switch {
	case u < 0.6:
		return http.StatusTooManyRequests
	case u < 0.9:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// wait waits for the slow-mode delay and reports whether it elapsed before
// ctx was done.
func (s *Server) wait(ctx context.Context) bool {
	return sleep(ctx, s.cfg.SlowDelay)
}

// act answers c, a request in lost-reply mode: it performs the request's
// action, unless its idempotency key is on record, and replies with the
// action's number, or loses the reply as c's mishap says.
func (s *Server) act(w http.ResponseWriter, r *http.Request, c *call) {
	action := s.perform(r.Header.Get(HeaderIdempotencyKey))
	switch {
	case c.mishap == mishapAbort:
		drop(w)
		return
	case c.mishap == mishapLate && !s.wait(r.Context()):
		return
	}
	c.setID(w.Header())
	writeJSON(w, http.StatusOK, actionBody{OK: true, Action: action})
}

// perform performs an action for a request with the given idempotency key
// ("" for none) and returns its number. If the key is on record it performs
// nothing and returns the number recorded; otherwise it records the new
// action under the key, forgetting the oldest key if it already remembers
// maxKeys of them.
func (s *Server) perform(key string) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "" {
		s.actions++
		return s.actions
	}
	// A digest keeps each record small however long the key.
	k := sha256.Sum256([]byte(key))
	if action, ok := s.keys[k]; ok {
		s.duplicates++
		return action
	}
	s.actions++
	if len(s.keyOrder) == maxKeys {
		delete(s.keys, s.keyOrder[0])
		s.keyOrder = s.keyOrder[1:]
	}
	s.keys[k] = s.actions
	s.keyOrder = append(s.keyOrder, k)
	return s.actions
}

// countStream counts a stream of stream-cut mode that ended as m says.
func (s *Server) countStream(m mishap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.streams[m]++
}

// drop closes the connection under w without writing a response. Where the
// connection cannot be taken over (HTTP/2, a recorder), it aborts the
// handler instead, which makes the server reset the stream.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	nc, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if c, ok := nc.(*conn); ok {
		nc = c.Conn // one from NewListener
	}
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetLinger(0) // send RST rather than FIN, like a crashed peer
	}
	nc.Close()
}

// Stats returns the counts since the server was created or last reset.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Requests:         s.requests,
		ByStatus:         make(map[string]int, len(s.byStatus)),
		StreamsCompleted: s.streams[mishapNone],
		StreamsCutInBand: s.streams[mishapInBand],
		StreamsCutAbort:  s.streams[mishapAbort],
		Actions:          int(s.actions),
		Duplicates:       s.duplicates,
		Continuations:    s.continuations,
		InputTokens:      s.inputTokens,
		OutputTokens:     s.outputTokens,
		Tallies:          make(map[string]map[string]Tally),
	}
	for k, v := range s.byStatus {
		st.ByStatus[k] = v
	}
	for id, t := range s.tallies {
		models := st.Tallies[id.key]
		if models == nil {
			models = make(map[string]Tally)
			st.Tallies[id.key] = models
		}
		models[id.model] = *t
	}
	return st
}

// Reset zeroes the counts, sets the sequence number of the next request
// back to 0, so that the outcomes of a seeded run repeat, and forgets every
// idempotency key, so that the next action is number 1 again.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = 0
	s.requests = 0
	clear(s.byStatus)
	s.streams = [mishapLate]int{}
	s.actions = 0
	s.duplicates = 0
	clear(s.keys)
	s.keyOrder = nil
	s.continuations = 0
	s.inputTokens = 0
	s.outputTokens = 0
	clear(s.tallies)
}

// allow reports whether r uses method, answering 405 if it does not.
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method {
		return true
	}
	w.Header().Set("Allow", method)
	msg := fmt.Sprintf("chaos: method %s not allowed on %s (want %s)", r.Method, r.URL.Path, method)
	writeError(w, http.StatusMethodNotAllowed, msg, "chaos_method_not_allowed", "method_not_allowed")
	return false
}

type okBody struct {
	OK      bool   `json:"ok"`
	Request uint64 `json:"request"`
	Text    string `json:"text,omitempty"` // text mode only
}

type actionBody struct {
	OK     bool   `json:"ok"`
	Action uint64 `json:"action"`
}

type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

func writeError(w http.ResponseWriter, status int, msg, typ, code string) {
	writeJSON(w, status, errorBody{errorDetail{Message: msg, Type: typ, Code: code}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) // the client hung up if this fails; nothing to do
}
