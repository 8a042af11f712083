package proxy

import (
	"maps"
	"sync"
	"sync/atomic"
)

// MaxLearnedModels is how many model names, beyond those the config
// names, get a label of their own: the first ones an upstream answered
// with a 2xx.
const MaxLearnedModels = 100

// OtherModel is the label of every model that is neither named in the
// config nor among the first MaxLearnedModels answered.
const OtherModel = "other"

// modelLabels names the models in the proxy's per-model keys: the target
// of rebound's events (and so the metrics' labels), the breakers and the
// quota cool-downs. A model name is the client's choice, and a client that
// makes them up must grow none of these: a model gets a label of its own
// when the config names it (a route's model, a fallback's) or when it is
// among the first MaxLearnedModels to get a 2xx; every other one is
// OtherModel. The access log keeps the name the client sent.
//
// So the made-up names share one breaker per upstream, rather than evict
// the breakers of real models; since upstreams answer a model they do not
// serve with a 400 or 404, which breakers ignore, their failures rarely
// count. A real model that has never been answered shares it too, until
// its first 2xx: once answered, its own breaker cannot be opened by the
// made-up names' failures.
type modelLabels struct {
	// named holds the configured and learnt names. It is replaced, never
	// changed, so that a request reads it without a lock.
	named atomic.Pointer[map[string]struct{}]

	mu      sync.Mutex   // serializes learn's replacements
	learned atomic.Int32 // names learnt; read without mu once full
}

// newModelLabels returns the labels of routes' configured models.
func newModelLabels(routes []*route) *modelLabels {
	named := map[string]struct{}{}
	for _, r := range routes {
		if r.model != "" {
			named[r.model] = struct{}{}
		}
		for _, t := range r.targets {
			if t.model != "" {
				named[t.model] = struct{}{}
			}
		}
	}
	l := &modelLabels{}
	l.named.Store(&named)
	return l
}

// key returns the per-model key of upstream and model:
// "upstream:label".
func (l *modelLabels) key(upstream, model string) string {
	return upstream + ":" + l.label(model)
}

// label returns model's label: its name, or OtherModel. A request that
// names no model keeps an empty label.
func (l *modelLabels) label(model string) string {
	if _, ok := (*l.named.Load())[model]; ok || model == "" {
		return model
	}
	return OtherModel
}

// learn notes that an upstream answered model with a 2xx: it gets a label
// of its own if fewer than MaxLearnedModels have.
func (l *modelLabels) learn(model string) {
	if _, ok := (*l.named.Load())[model]; ok || model == "" || l.learned.Load() >= MaxLearnedModels {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	named := *l.named.Load()
	if _, ok := named[model]; ok || l.learned.Load() >= MaxLearnedModels {
		return
	}
	grown := maps.Clone(named)
	grown[model] = struct{}{}
	l.named.Store(&grown)
	l.learned.Add(1)
}
