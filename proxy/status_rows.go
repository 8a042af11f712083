package proxy

import (
	"strings"

	"github.com/rebound-go/rebound/breaker"
)

// stateOf returns b's state: its own, if it can say (breaker.Breaker),
// else open when its latest Allow refused.
func stateOf(b *keptBreaker) breaker.State {
	if s, ok := b.b.(interface{ State() breaker.State }); ok {
		return s.State()
	}
	if b.refusing.Load() {
		return breaker.Open
	}
	return breaker.Closed
}

// severity orders breaker states from the best (closed) to the worst
// (open).
func severity(s breaker.State) int {
	switch s {
	case breaker.Open:
		return 2
	case breaker.HalfOpen:
		return 1
	}
	return 0
}

// splitTarget returns the upstream and key of a breaker's (and an
// event's) target: "UPSTREAM:MODEL", or "UPSTREAM/KEYVAR:MODEL" for a key
// of a pool.
func splitTarget(target string) (upstream, key string) {
	name, _, _ := strings.Cut(target, ":")
	upstream, key, _ = strings.Cut(name, "/")
	return upstream, key
}
