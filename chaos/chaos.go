package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
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

	// KeyRPM and KeyTPM hold each API key the server sees to that many
	// requests and input tokens per KeyWindow (see Per-key limits); zero
	// (the default) means no such limit. They must not be negative.
	KeyRPM, KeyTPM int
	// KeyWindow is the window of KeyRPM and KeyTPM. It must not be
	// negative; the default (0) is DefaultKeyWindow, a minute.
	KeyWindow time.Duration
	// KeysOutOfQuota are prefixes of API keys that are out of quota from
	// the start: every request with a key that starts with one gets the
	// profile's quota-exhausted 429. A prefix names a key without
	// giving it away. Empty prefixes are not allowed. The default (none)
	// means every key has quota.
	KeysOutOfQuota []string

	// PromptCache makes the server cache prompts as providers do (see
	// Prompt cache): per API key and model, the prefixes of at least
	// MinCacheTokens it has seen, whole messages at a time, reported as
	// read from the cache and written into it in each dialect's own
	// fields. The default (false) caches nothing: every input token is
	// read afresh.
	PromptCache bool
	// CacheTTL is how long a cached prefix lives after it was last
	// written or read. It must not be negative, nor set without
	// PromptCache; the default (0) is DefaultCacheTTL, five minutes.
	CacheTTL time.Duration
}

// Server is a fault-injecting [http.Handler]. Create one with [New]. It is
// safe for concurrent use.
type Server struct {
	cfg        Config // with defaults applied
	retryAfter int64  // RetryAfter in whole seconds, rounded up

	// mu guards next, requests, byStatus, streams, actions, duplicates,
	// keys, keyOrder, continuations, inputTokens, outputTokens,
	// cacheRead, cacheWrite, tallies and keyWindows. The prompt cache has
	// a lock of its own.
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

	keyWindows map[string]*keyWindow // each API key's use of its limits, by KeyLabel

	cacheRead, cacheWrite int          // as in Stats.CacheReadTokens, CacheWriteTokens
	cache                 *promptCache // nil without Config.PromptCache
}

// MaxRetryAfter is the longest Config.RetryAfter: a year, the longest wait
// hint a client is expected to take at face value. A request's
// HeaderRetryAfter is not bound by it, so that a test can still send an
// absurd hint.
const MaxRetryAfter = 365 * 24 * time.Hour

// New returns a server for cfg, or an error if cfg names an unknown mode or
// profile, has a FailRate outside [0, 1] or NaN, a negative duration, a
// RetryAfter beyond MaxRetryAfter, a negative CutAfter, or a CacheTTL
// without PromptCache.
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
	case cfg.KeyRPM < 0 || cfg.KeyTPM < 0:
		return nil, fmt.Errorf("chaos: negative per-key limit (requests %d, tokens %d)", cfg.KeyRPM, cfg.KeyTPM)
	case cfg.KeyWindow < 0:
		return nil, fmt.Errorf("chaos: negative key window %v", cfg.KeyWindow)
	case slices.Contains(cfg.KeysOutOfQuota, ""):
		return nil, errors.New("chaos: an empty prefix of a key out of quota would match every key")
	case cfg.CacheTTL < 0:
		return nil, fmt.Errorf("chaos: negative cache TTL %v", cfg.CacheTTL)
	case cfg.CacheTTL > 0 && !cfg.PromptCache:
		return nil, fmt.Errorf("chaos: a cache TTL of %v without PromptCache, which keeps no cache", cfg.CacheTTL)
	}
	if cfg.PromptCache && cfg.CacheTTL == 0 {
		cfg.CacheTTL = DefaultCacheTTL
	}
	if cfg.KeyWindow == 0 {
		cfg.KeyWindow = DefaultKeyWindow
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
	s := &Server{
		cfg:        cfg,
		retryAfter: int64((cfg.RetryAfter + time.Second - 1) / time.Second),
		byStatus:   make(map[string]int),
		keys:       make(map[[32]byte]uint64),
		tallies:    make(map[tallyID]*Tally),
		keyWindows: make(map[string]*keyWindow),
	}
	if cfg.PromptCache {
		s.cache = newPromptCache(cfg.CacheTTL)
	}
	return s, nil
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

// wait waits for the slow-mode delay and reports whether it elapsed before
// ctx was done.
func (s *Server) wait(ctx context.Context) bool {
	return sleep(ctx, s.cfg.SlowDelay)
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
