package ratelimit

// Headroom is what a pacer knows of what is left of its provider's
// quotas: the latest rate-limit headers' remaining counts over their
// limits, less what was sent since. A caller with several keys of one
// provider sends to the key with the most headroom.
type Headroom struct {
	// Requests and Tokens are the fractions of the requests and tokens
	// limits left, from 0 (nothing left until the reset) to 1. Each is 1
	// while nothing is known of it: no header has announced its limit,
	// remaining count and reset, or the reset has passed.
	Requests, Tokens float64
	// Known says that the headers announced at least one of the two and
	// it has not reset since.
	Known bool
}

// Least returns the smaller of h's two fractions: the one a call runs out
// of first.
func (h Headroom) Least() float64 { return min(h.Requests, h.Tokens) }

// Headroom returns what l knows of what is left of its provider's quotas
// now (see Headroom). It does not reserve anything.
func (l *Limiter) Headroom() Headroom {
	r, t, known := l.announced.Headroom(l.now())
	return Headroom{Requests: r, Tokens: t, Known: known}
}
