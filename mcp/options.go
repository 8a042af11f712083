package reboundmcp

import "time"

// Defaults of a zero Options; each field's doc gives its figure.
const (
	defaultDownWait      = 10 * time.Second
	defaultIdleTimeout   = 60 * time.Second
	defaultRestartMin    = 100 * time.Millisecond
	defaultRestartMax    = 2 * time.Second
	defaultHealthyAfter  = 10 * time.Second
	defaultCrashLimit    = 10
	defaultCrashWindow   = 30 * time.Second
	defaultCrashCooldown = 30 * time.Second
)

// orDefault returns d for a zero v, v otherwise.
func orDefault[T comparable](v, d T) T {
	var zero T
	if v == zero {
		return d
	}
	return v
}

// idleTimeout returns the idle timeout, or 0 for none.
func (o *Options) idleTimeout() time.Duration {
	return max(0, orDefault(o.IdleTimeout, defaultIdleTimeout))
}

// positive returns d for a zero or negative v, v otherwise: for the
// settings of the restart schedule, where no wait at all would let a
// server that dies at once be spawned in a tight loop.
func positive(v, d time.Duration) time.Duration {
	if v <= 0 {
		return d
	}
	return v
}
