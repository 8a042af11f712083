// Package chaos provides a fault-injecting HTTP server for exercising retry
// logic.
//
// A [Server] is an [http.Handler] that stands in for a flaky upstream such as
// a model API. It ignores what a request asks for and answers with an outcome
// chosen by a mode: always succeed, fail at random, be down, reject the
// request, rate-limit with a Retry-After hint, answer slowly, or drop the
// connection. rebound's benchmark and tests serve it with [net/http/httptest]
// or a plain [http.Server] and point a client at it.
//
// # Modes
//
//   - [ModeOK]: 200.
//   - [ModeRandom]: fail with probability [Config.FailRate] (35% by default);
//     a failure is 429 Too Many Requests 60% of the time, 503 Service
//     Unavailable 30% and 500 Internal Server Error 10%.
//   - [ModeDown]: 503.
//   - [ModeBadRequest]: 400, a failure no retry can fix.
//   - [ModeRetryAfter]: 429 with a Retry-After header of
//     [Config.RetryAfter] in whole seconds.
//   - [ModeSlow]: 200 after [Config.SlowDelay], or nothing at all if the
//     client goes away first.
//   - [ModeReset]: the connection is closed without a response.
//
// Only retryafter mode sends a wait hint; every other failure leaves the
// client to choose its own backoff.
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
// [Server.Reset] starts the sequence over.
//
// # Responses
//
// All bodies are JSON. A success is
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
	ModeRetryAfter = "retryafter" // 429 with Retry-After: N (whole seconds)
	ModeSlow       = "slow"       // 200 after SlowDelay (returns early if the client goes away)
	ModeReset      = "reset"      // drop the connection without a response
)

// modes lists every mode, in the order error messages name them.
var modes = []string{ModeOK, ModeRandom, ModeDown, ModeBadRequest, ModeRetryAfter, ModeSlow, ModeReset}

// Request parameters and control paths understood by a [Server].
const (
	// HeaderMode is the request header that picks the mode of one request.
	HeaderMode = "X-Chaos-Mode"
	// QueryMode is the query parameter that picks the mode of one request
	// when the HeaderMode header is absent.
	QueryMode = "chaos_mode"
	// StatsPath is the control endpoint that reports [Stats] (GET).
	StatsPath = "/chaos/stats"
	// ResetPath is the control endpoint that calls [Server.Reset] (POST).
	ResetPath = "/chaos/reset"
)

// Config configures a [Server]. The zero value is a server in random mode
// failing 35% of requests, with seed 0.
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

	// RetryAfter is the wait announced by the Retry-After header in
	// retryafter mode, sent in whole seconds, rounded up. It must not be
	// negative; the default (0) is one second.
	RetryAfter time.Duration

	// SlowDelay is how long a request waits before its answer in slow mode.
	// It must not be negative; the default (0) is one second.
	SlowDelay time.Duration
}

// Server is a fault-injecting [http.Handler]. Create one with [New]. It is
// safe for concurrent use.
type Server struct {
	cfg        Config // with defaults applied
	retryAfter string // Retry-After header value for retryafter mode

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

// New returns a server for cfg, or an error if cfg names an unknown mode,
// has a FailRate outside [0, 1] or NaN, or a negative duration.
func New(cfg Config) (*Server, error) {
	if cfg.Mode == "" {
		cfg.Mode = ModeRandom
	} else if !knownMode(cfg.Mode) {
		return nil, unknownModeError(cfg.Mode)
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
	secs := (cfg.RetryAfter + time.Second - 1) / time.Second
	return &Server{
		cfg:        cfg,
		retryAfter: strconv.FormatInt(int64(secs), 10),
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

// ServeHTTP answers r according to its mode, or serves a control endpoint.
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

	mode := r.Header.Get(HeaderMode)
	if mode == "" {
		mode = r.URL.Query().Get(QueryMode)
	}
	if mode == "" {
		mode = s.cfg.Mode
	}
	n, status := s.admit(mode)
	switch {
	case !knownMode(mode):
		writeError(w, http.StatusBadRequest, unknownModeError(mode).Error(), "chaos_unknown_mode", mode)
		return
	case mode == ModeReset:
		drop(w)
		return
	case mode == ModeSlow && !s.wait(r.Context()):
		return
	case mode == ModeRetryAfter:
		w.Header().Set("Retry-After", s.retryAfter)
	}
	if status == http.StatusOK {
		writeJSON(w, status, okBody{OK: true, Request: n})
		return
	}
	msg := fmt.Sprintf("chaos: injected %d %s", status, http.StatusText(status))
	writeError(w, status, msg, "chaos_injected", mode)
}

// statusReset stands for a dropped connection among status codes.
const statusReset = 0

// admit gives a request in the given mode its sequence number, decides its
// status and counts it.
func (s *Server) admit(mode string) (n uint64, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n = s.next
	s.next++
	status = s.outcome(mode, n)
	s.requests++
	key := "reset"
	if status != statusReset {
		key = strconv.Itoa(status)
	}
	s.byStatus[key]++
	return n, status
}

// outcome returns the status of request n in the given mode.
func (s *Server) outcome(mode string, n uint64) int {
	switch mode {
	case ModeOK, ModeSlow:
		return http.StatusOK
	case ModeRandom:
		return s.randomStatus(n)
	case ModeDown:
		return http.StatusServiceUnavailable
	case ModeRetryAfter:
		return http.StatusTooManyRequests
	case ModeReset:
		return statusReset
	default: // ModeBadRequest and unknown modes
		return http.StatusBadRequest
	}
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
