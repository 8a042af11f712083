// Package chaosmcp is a flaky MCP server, built on the official Go SDK,
// to test MCP clients and proxies against: what the chaos package is for
// LLM APIs, this is for tools.
//
// Its three tools keep a small map of keys to values, and they are the
// three kinds a client must tell apart when a call is cut short: lookup
// reads a key and is annotated read-only; set writes a key and is
// annotated idempotent (setting it again changes nothing more); append
// adds to a key's value and is neither, so a second run of the same call
// appends twice. Each tool's run is counted, in a file that outlives the
// process if Config.CountFile names one, so a test can prove that a call
// ran exactly once although the server crashed while answering it.
//
// A Config's zero value is a well-behaved server; its fields add faults,
// all of them to tools/call only, drawn from a source seeded by
// Config.Seed: the process exits after a number of calls or at random
// (after the call has run: its effect happened, its answer is lost), a
// call hangs (it never runs and never answers), answers slowly (with
// progress notifications, if asked), fails with an isError result (it did
// not run), or, over HTTP, finds its session forgotten, as a restarted
// server answers: 404 Not Found.
//
// Serve it over stdio with Run(ctx, &mcp.StdioTransport{}), or over
// streamable HTTP with the Server as an http.Handler: it serves MCP at
// /mcp and the counts as JSON at GET /chaos/counts.
package chaosmcp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Config says which faults a Server injects. Its zero value injects none.
// Rates are probabilities per tools/call, drawn together: their sum must
// not pass 1.
type Config struct {
	// CrashAfter, if positive, makes the process exit after the
	// CrashAfter-th call it has run, and after every CrashAfter-th
	// since: the call has run and been counted, its answer is never sent.
	// A restarted process counts from zero again.
	CrashAfter int
	// CrashRate is the probability that a call, having run, makes the
	// process exit instead of answering.
	CrashRate float64
	// HangRate is the probability that a call never runs and never
	// answers, until it is cancelled or its session ends.
	HangRate float64
	// ErrorRate is the probability that a call does not run and answers
	// with an isError result.
	ErrorRate float64
	// Slow delays every call's run by this long. Zero means no delay.
	Slow time.Duration
	// Progress, during a Slow delay, sends a progress notification every
	// tenth of Slow (at most a second apart) if the call asked for
	// progress with a progress token.
	Progress bool
	// LoseSessionsEvery, if positive, makes every LoseSessionsEvery-th
	// tools/call over HTTP find its session forgotten: the server drops
	// all its sessions, as if it had restarted, and answers that request
	// 404 Not Found; it has not run. Over stdio there are no sessions to
	// lose.
	LoseSessionsEvery int
	// CountFile, if set, is a file to which every run appends one line,
	// synced to disk before the call answers or crashes, so that counts
	// survive the process; a server starting on an existing file counts
	// on from it. Empty means counts kept in memory only.
	CountFile string
	// Seed seeds the draws of the rates. Zero is a seed like any other.
	Seed uint64
}

// CrashExitCode is the exit code of a process that a crash fault ends.
const CrashExitCode = 3

// ErrBadConfig is wrapped by the error New returns for a Config it refuses.
var ErrBadConfig = errors.New("chaosmcp: bad config")

// A Server is a flaky MCP server. It is an http.Handler; Run serves it
// over any other transport.
type Server struct {
	cfg Config

	mu      sync.Mutex // guards the fields below
	rng     *rand.Rand
	runs    int            // calls run by this process, for CrashAfter
	calls   int            // tools/calls over HTTP, for LoseSessionsEvery
	counts  map[string]int // runs by tool, those in CountFile included
	values  map[string]string
	counter *os.File // CountFile, open for appending
	gen     *generation
}

// New returns a Server for cfg, opening cfg.CountFile if it names one.
func New(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:    cfg,
		rng:    rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		counts: map[string]int{},
		values: map[string]string{},
	}
	if cfg.CountFile != "" {
		counts, err := ReadCounts(cfg.CountFile)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("chaosmcp: count file: %w", err)
		}
		if counts != nil {
			s.counts = counts
		}
		if s.counter, err = os.OpenFile(cfg.CountFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err != nil {
			return nil, fmt.Errorf("chaosmcp: count file: %w", err)
		}
	}
	s.gen = s.newGeneration()
	return s, nil
}

func (c Config) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...)
	}
	for _, r := range []struct {
		name string
		v    float64
	}{{"CrashRate", c.CrashRate}, {"HangRate", c.HangRate}, {"ErrorRate", c.ErrorRate}} {
		if !(r.v >= 0 && r.v <= 1) {
			return bad("%s %v outside [0, 1]", r.name, r.v)
		}
	}
	switch {
	case c.CrashRate+c.HangRate+c.ErrorRate > 1+1e-9:
		return bad("CrashRate, HangRate and ErrorRate add up to %v, more than 1", c.CrashRate+c.HangRate+c.ErrorRate)
	case c.CrashAfter < 0:
		return bad("CrashAfter %d is negative", c.CrashAfter)
	case c.LoseSessionsEvery < 0:
		return bad("LoseSessionsEvery %d is negative", c.LoseSessionsEvery)
	case c.Slow < 0:
		return bad("Slow %v is negative", c.Slow)
	}
	return nil
}

// Run serves the server over t (&mcp.StdioTransport{}, say) until the
// client leaves or ctx is done.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	return s.current().server.Run(ctx, t)
}

// Counts returns how many times each tool has run, runs recorded in
// Config.CountFile before this Server started included.
func (s *Server) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts := make(map[string]int, len(s.counts))
	for k, v := range s.counts {
		counts[k] = v
	}
	return counts
}

// Close closes the count file. Sessions end with their transports.
func (s *Server) Close() error {
	if s.counter == nil {
		return nil
	}
	return s.counter.Close()
}

// fault is what a call does besides running.
type fault int

const (
	faultNone fault = iota
	faultCrash
	faultHang
	faultError
)

// draw picks the fault of the next call.
func (s *Server) draw() fault {
	s.mu.Lock()
	u := s.rng.Float64()
	s.mu.Unlock()
	switch c := s.cfg; {
	case u < c.CrashRate:
		return faultCrash
	case u < c.CrashRate+c.HangRate:
		return faultHang
	case u < c.CrashRate+c.HangRate+c.ErrorRate:
		return faultError
	}
	return faultNone
}

// wait waits out the Slow delay, sending progress if asked, or until ctx
// is done.
func (s *Server) wait(ctx context.Context, req *mcp.CallToolRequest) error {
	if s.cfg.Slow <= 0 {
		return nil
	}
	done := time.NewTimer(s.cfg.Slow)
	defer done.Stop()
	var tick <-chan time.Time
	token := req.Params.GetProgressToken()
	if s.cfg.Progress && token != nil {
		t := time.NewTicker(max(min(s.cfg.Slow/10, time.Second), time.Millisecond))
		defer t.Stop()
		tick = t.C
	}
	total := math.Ceil(float64(s.cfg.Slow) / float64(time.Millisecond))
	start := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done.C:
			return nil
		case <-tick:
			req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      math.Min(float64(time.Since(start).Milliseconds()), total),
				Total:         total,
				Message:       "chaos: slow call",
			})
		}
	}
}
