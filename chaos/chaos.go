// Package chaos provides a fault-injecting HTTP server for exercising retry
// logic.
//
// A [Server] is an [http.Handler] that stands in for a flaky upstream such as
// a model API. What a request asks for has no bearing on its outcome, which
// is chosen by a mode: always succeed, fail at random, be down, reject the
// request, rate-limit with a wait hint, answer slowly, drop the connection,
// or fail the way a model provider does when it is overloaded, out of quota
// or given too long a prompt. rebound's benchmark and tests serve it with
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
//     anthropic profiles, 503 in the openai and gemini ones.
//   - [ModeQuota]: 429 for an exhausted quota or spend limit, which a prompt
//     retry does not fix.
//   - [ModeContext]: the prompt is longer than the model takes: 400, or 413
//     in the plain profile. No retry can fix it.
//
// A request uses [Config.Mode] unless it names a mode of its own, in the
// [HeaderMode] header or, failing that, the [QueryMode] query parameter. A
// request naming an unknown mode gets 400 with an error body naming it.
//
// # Determinism
//
// Every request other than a control request is given a sequence number: 0,
// 1, 2, … in order of arrival. The random-mode outcome of request n is a pure
// function of [Config.Seed] and n, so a run that sends its requests one after
// another sees the same outcomes every time, and over many requests the
// failure rate and the mix of statuses approach the configured ones.
// Concurrent requests race for sequence numbers, so which request gets which
// outcome is then up to the scheduler, but when all of them are in random
// mode the outcomes of the first N, taken together, are still fixed.
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
// "stream": true; they look at no more than the first MiB of the body, and a
// body they cannot parse asks for no stream. A success names the model the
// request body names, if any (for gemini, the model in the path), and says
// "Hello from chaos." with a plausible token usage. Every failure uses the
// provider's status, error type and message for its kind of trouble. The
// openai and anthropic profiles send a request id header and, with a success
// and in retryafter mode, the provider's rate-limit headers.
//
// A request uses [Config.Profile] unless it names a profile of its own in the
// [HeaderProfile] header. A request naming an unknown profile gets 400 with a
// plain error body naming it.
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
// where n is the request's sequence number. A failure has the shape of a
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
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
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
)

// modes lists every mode, in the order error messages name them.
var modes = []string{
	ModeOK, ModeRandom, ModeDown, ModeBadRequest, ModeRetryAfter, ModeSlow, ModeReset,
	ModeOverload, ModeQuota, ModeContext,
}

// Profiles a [Server] can answer in, as named in [Config.Profile] and the
// [HeaderProfile] header.
const (
	ProfilePlain     = "plain"     // the server's own bodies
	ProfileOpenAI    = "openai"    // OpenAI's Chat Completions and Responses APIs
	ProfileAnthropic = "anthropic" // Anthropic's Messages API
	ProfileGemini    = "gemini"    // Google's Gemini API
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

	// FailRate is the probability that a request fails in random mode. It
	// must lie in [0, 1]; the default (0) is 0.35.
	FailRate float64

	// Seed seeds the sequence of random-mode outcomes. The default is 0,
	// which is as good a seed as any other.
	Seed uint64

	// RetryAfter is the wait announced by a wait hint, sent in whole
	// seconds, rounded up. It must not be negative; the default (0) is one
	// second.
	RetryAfter time.Duration

	// SlowDelay is how long a request waits before its answer in slow mode.
	// It must not be negative; the default (0) is one second.
	SlowDelay time.Duration

	// Profile is the profile of requests that do not name one.
	// The default ("") is ProfilePlain.
	Profile string

	// HintEveryFailure makes every failure carry a wait hint of RetryAfter,
	// whatever its mode. The default (false) hints only in retryafter mode
	// and at requests that ask with the HeaderRetryAfter header.
	HintEveryFailure bool
}

// Server is a fault-injecting [http.Handler]. Create one with [New]. It is
// safe for concurrent use.
type Server struct {
	cfg        Config // with defaults applied
	retryAfter int64  // RetryAfter in whole seconds, rounded up

	mu       sync.Mutex     // guards next, requests and byStatus
	next     uint64         // sequence number of the next request
	requests int            // requests served since the last Reset
	byStatus map[string]int // as in Stats.ByStatus
}

// Stats counts the requests a [Server] has served since it was created or
// last reset. A request is counted, under the outcome chosen for it, when it
// arrives; a slow request whose client goes away is still counted as 200.
type Stats struct {
	// Requests is the number of requests served, control requests excluded.
	Requests int `json:"requests"`
	// ByStatus counts requests by status code in decimal ("200", "429",
	// ...); dropped connections are counted under "reset". It is never nil.
	ByStatus map[string]int `json:"by_status"`
}

// New returns a server for cfg, or an error if cfg names an unknown mode or
// profile, has a FailRate outside [0, 1] or NaN, or a negative duration.
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
	case cfg.SlowDelay < 0:
		return nil, fmt.Errorf("chaos: negative slow delay %v", cfg.SlowDelay)
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
	}, nil
}

func knownMode(mode string) bool {
	for _, m := range modes {
		if m == mode {
			return true
		}
	}
	return false
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
	c.n, c.fault = s.admit(c.mode, c.profile, rej != nil)
	switch {
	case rej != nil:
		c.reject(w, *rej)
		return
	case c.fault == faultReset:
		drop(w)
		return
	case c.mode == ModeSlow && !s.wait(r.Context()):
		return
	}
	c.answer(w, r)
}

// newCall reads the mode, profile and wait hint of r. If r names something
// the server does not know, it returns the rejection to answer with and a
// call good enough to answer it in.
func (s *Server) newCall(r *http.Request) (*call, *rejection) {
	c := &call{profile: plain, wait: noHint}
	name := r.Header.Get(HeaderProfile)
	if name == "" {
		name = s.cfg.Profile
	}
	p := profileNamed(name)
	if p == nil {
		return c, &rejection{"chaos_unknown_profile", name, unknownProfileError(name).Error()}
	}
	c.profile = p

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

// admit gives a request in the given mode and profile its sequence number,
// decides its fault and counts it. A rejected request is a bad request.
func (s *Server) admit(mode string, p *profile, rejected bool) (n uint64, f fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n = s.next
	s.next++
	f = faultBadRequest
	if !rejected {
		f = s.outcome(mode, n)
	}
	s.requests++
	key := "reset"
	if f != faultReset {
		key = strconv.Itoa(p.status(f))
	}
	s.byStatus[key]++
	return n, f
}

// outcome returns the fault of request n in the given mode.
func (s *Server) outcome(mode string, n uint64) fault {
	if mode == ModeRandom {
		return randomFaults[s.randomStatus(n)]
	}
	return modeFaults[mode]
}

// modeFaults gives the fault of every mode but random.
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
}

// randomFaults maps the statuses of random mode to their faults.
var randomFaults = map[int]fault{
	http.StatusOK:                  faultNone,
	http.StatusTooManyRequests:     faultRateLimit,
	http.StatusServiceUnavailable:  faultUnavailable,
	http.StatusInternalServerError: faultInternal,
}

// randomStatus returns the random-mode status of request n, a pure function
// of the seed and n.
func (s *Server) randomStatus(n uint64) int {
	rng := rand.New(rand.NewPCG(s.cfg.Seed, n))
	if rng.Float64() >= s.cfg.FailRate {
		return http.StatusOK
	}
	switch u := rng.Float64(); {
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
	t := time.NewTimer(s.cfg.SlowDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// drop closes the connection under w without writing a response. Where the
// connection cannot be taken over (HTTP/2, a recorder), it aborts the
// handler instead, which makes the server reset the stream.
func drop(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0) // send RST rather than FIN, like a crashed peer
	}
	conn.Close()
}

// Stats returns the counts since the server was created or last reset.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Requests: s.requests, ByStatus: make(map[string]int, len(s.byStatus))}
	for k, v := range s.byStatus {
		st.ByStatus[k] = v
	}
	return st
}

// Reset zeroes the counts and sets the sequence number of the next request
// back to 0, so that the outcomes of a seeded run repeat.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next = 0
	s.requests = 0
	clear(s.byStatus)
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
