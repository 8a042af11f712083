package chaos

import (
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"time"
)

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
		s.limitKey(c, time.Now())
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
