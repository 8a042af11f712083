package fallback

import (
	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/breaker"
)

// Recommended returns rebound's recommended setup over targets: each gets
// the zero rebound.Policy, rebound's recommended one (its Observer,
// Rules, Classifier and Rand are kept) and a breaker of its own, made with
// breakers (the zero Config is the recommended one), and the chain falls
// back on overload, exhausted quota and open breakers.
func Recommended[Req, Resp any](breakers breaker.Config, targets ...Target[Req, Resp]) *Chain[Req, Resp] {
	set := breaker.NewSet(breakers, 0)
	out := make([]Target[Req, Resp], len(targets))
	for i, t := range targets {
		p := rebound.Policy{Observer: t.Policy.Observer, Rules: t.Policy.Rules, Classifier: t.Policy.Classifier, Rand: t.Policy.Rand}
		p.Breaker = set.Get(t.Name)
		t.Policy = p
		out[i] = t
	}
	return &Chain[Req, Resp]{Targets: out}
}

// GatewayMaxAttempts is the attempts GatewayPolicy allows.
const GatewayMaxAttempts = 4

// GatewayPolicy is the retry policy rebound recommends for the targets of
// callers that have turned their own retries off, as a gateway's clients
// (rebound proxy's) do: rebound's recommended one with an attempt more
// (GatewayMaxAttempts), since these retries are the only ones left; an
// overloaded target still gets rebound's 2 attempts, not more load (and a
// chain moves on from it at once, unless it is the last resort).
func GatewayPolicy() rebound.Policy {
	return rebound.Policy{MaxAttempts: GatewayMaxAttempts,
		PerKind: map[rebound.Kind]rebound.Override{rebound.KindOverloaded: {MaxAttempts: 2}}}
}
