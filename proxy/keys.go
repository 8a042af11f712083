package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/fallback"
	"github.com/rebound-go/rebound/ratelimit"
)

// poolKey is one key of an upstream's pool: the variable that holds it,
// which names it everywhere, and its value, which goes only upstream.
type poolKey struct{ env, value string }

// envName is what a key variable's name may be: it becomes part of the
// pooled key's breaker, limiter and cool-down keys.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// poolKeys returns the keys of upstream u, at where in the config, from
// its keys_env; nil for an upstream of one key (key_env, or none).
func poolKeys(where string, u UpstreamConfig, getenv func(string) string) ([]poolKey, error) {
	if u.Affinity != "" && u.Affinity != AffinityNone {
		return nil, configErr(where+".affinity", "%q is not %q (leave it out to keep conversations on their keys, the default)", u.Affinity, AffinityNone)
	}
	if u.KeysEnv == nil {
		return nil, nil
	}
	switch {
	case u.KeyEnv != "":
		return nil, configErr(where, "key_env and keys_env both given: give one key in key_env or a pool of keys in keys_env")
	case len(u.KeysEnv) == 0:
		return nil, configErr(where+".keys_env", "empty (want the names of the variables holding the keys)")
	}
	keys := make([]poolKey, 0, len(u.KeysEnv))
	holder := map[string]string{} // a key's value → the variable that holds it
	for i, env := range u.KeysEnv {
		at := fmt.Sprintf("%s.keys_env[%d]", where, i)
		if !envName.MatchString(env) {
			return nil, configErr(at, "%q is not a variable name (want letters, digits and _)", env)
		}
		value := getenv(env)
		for _, k := range keys {
			if k.env == env {
				return nil, configErr(at, "%s is named twice", env)
			}
		}
		if value == "" {
			return nil, configErr(at, "environment variable %s is not set", env)
		}
		if other, ok := holder[value]; ok {
			return nil, configErr(at, "%s holds the same key as %s: a pool's keys must differ, or their limits do not add up", env, other)
		}
		holder[value] = env
		keys = append(keys, poolKey{env: env, value: value})
	}
	return keys, nil
}

// checkUpstreamName reports what is wrong with an upstream's name: it is
// the first part of its keys ("UPSTREAM:MODEL", "UPSTREAM/KEYVAR:MODEL").
func checkUpstreamName(name string) error {
	switch {
	case name == "":
		return errors.New("an upstream's name is empty")
	case strings.ContainsAny(name, "/:"):
		return fmt.Errorf("the name %q has a \"/\" or \":\", which separate upstream, key and model in breaker and metric keys", name)
	}
	return nil
}

// makePool returns an upstream per key of the pool name at rawURL, each
// named "name/KEYVAR", with its own pace (limits, as the Proxy's Limiter
// makes it, under that name) and adaptive limit on requests in flight,
// and one retry budget for them all: a retry is more load on the same
// provider whichever key it goes with.
func (m upstreamMaker) makePool(name, rawURL, dialect string, keys []poolKey, limits ratelimit.Config) ([]*upstream, error) {
	var pool []*upstream
	for _, k := range keys {
		up, err := m.make(name+"/"+k.env, rawURL, dialect, k.value, limits)
		if err != nil {
			return nil, err
		}
		up.pool, up.keyVar = name, k.env
		if len(pool) > 0 {
			up.budget = pool[0].budget
		}
		pool = append(pool, up)
	}
	return pool, nil
}

// affinityName returns how up, a key of the upstream configured as u, is
// known to the conversation affinity of its pool (fallback.Target.
// Affinity): the first 16 hex digits of the SHA-256 of a label and the
// key's value, the same on every replica whatever variable holds the key
// and wherever keys_env lists it; "" for an upstream of one key, or of a
// pool whose affinity is AffinityNone. It is never shown.
func affinityName(u UpstreamConfig, up *upstream) string {
	if up.pool == "" || u.Affinity == AffinityNone {
		return ""
	}
	sum := sha256.Sum256([]byte("rebound key affinity\x00" + up.key))
	return hex.EncodeToString(sum[:8])
}

// ready reports whether t can take c's request at once: the breaker of
// its key and model is not open, a slot of its limit on requests in
// flight is free, what its headers announced is not spent, and its pace
// (for a pacer that says) holds nothing back.
func (p *Proxy) ready(t target, c *call) bool {
	if b, ok := p.breakers.kept.Load(p.models.key(t.up.name, t.modelFor(c))); ok && b.open(time.Now()) {
		return false
	}
	if !t.up.adaptive.Free() || t.up.headroom() <= 0 {
		return false
	}
	r, ok := t.up.pacer.(interface{ Ready(tokens int) bool })
	return !ok || r.Ready(1) // 1: what the upstream's Transport charges a request
}

// pool names t's pool in a route's chain: its upstream's keys asked for
// the same model; "" for an upstream of one key.
func (t target) pool() string {
	if t.up.pool == "" {
		return ""
	}
	return t.up.pool + ":" + t.model
}

// noticedCooldowns are the proxy's Cooldowns, noting on each upstream
// when the latest cool-down started on it ends, for the status page.
type noticedCooldowns struct {
	fallback.Cooldowns
	upstreams map[string]*upstream // by name, "UPSTREAM" or "UPSTREAM/KEYVAR"
}

// Start starts the cool-down of target, a breaker's key
// ("UPSTREAM/KEYVAR:MODEL"), and notes its end on its upstream.
func (n noticedCooldowns) Start(ctx context.Context, target string, now time.Time, d time.Duration) {
	n.Cooldowns.Start(ctx, target, now, d)
	name, _, _ := strings.Cut(target, ":")
	if up := n.upstreams[name]; up != nil {
		up.coolingUntil.Store(now.Add(d).UnixNano())
	}
}

// noticing returns c noting the cool-downs of the upstreams of routes.
func noticing(c fallback.Cooldowns, routes []*route) fallback.Cooldowns {
	ups := map[string]*upstream{}
	for _, r := range routes {
		for _, t := range r.targets {
			ups[t.up.name] = t.up
		}
	}
	return noticedCooldowns{Cooldowns: c, upstreams: ups}
}

// headroom returns the least fraction of up's limits left, as its pacer
// learnt from the headers (ratelimit.Headroom.Least); 1 for a pacer that
// does not say.
func (up *upstream) headroom() float64 {
	return up.headroomNow().Least()
}

// headroomNow returns what up's pacer knows of its quotas; nothing known
// for a pacer that does not say.
func (up *upstream) headroomNow() ratelimit.Headroom {
	if h, ok := up.pacer.(interface{ Headroom() ratelimit.Headroom }); ok {
		return h.Headroom()
	}
	return ratelimit.Headroom{Requests: 1, Tokens: 1}
}

// keyRow is one upstream key as the status page shows it.
type keyRow struct {
	Upstream string // the configured upstream's name
	Key      string // the variable holding a pool's key; "" for an upstream of one key
	Host     string // the upstream's scheme://host[:port], nothing of its user, path or query
	// Breaker is the worst state of the key's breakers, one per model
	// ("closed", "half-open", "open"): a model whose breaker opened shows
	// though another model of the key answers.
	Breaker string
	// RequestsHeadroom and TokensHeadroom are the fractions of the key's
	// limits left (ratelimit.Headroom); Known says the headers told.
	RequestsHeadroom, TokensHeadroom float64
	Known                            bool
	// CoolingUntil is when the key's quota cool-down ends, as far as this
	// process knows; zero if it is not cooling down.
	CoolingUntil time.Time
}

// keyRows returns a row for each upstream key of p's routes, in the
// order the routes name them.
func (p *Proxy) keyRows() []keyRow {
	worst := map[string]breaker.State{} // by the name part of the breakers' keys: "UPSTREAM" or "UPSTREAM/KEYVAR"
	for key, b := range p.breakers.kept.All() {
		name, _, _ := strings.Cut(key, ":")
		if s := stateOf(b); severity(s) > severity(worst[name]) {
			worst[name] = s
		}
	}
	var rows []keyRow
	seen := map[*upstream]bool{}
	for _, r := range p.routes {
		for _, t := range r.targets {
			up := t.up
			if seen[up] {
				continue
			}
			seen[up] = true
			h := up.headroomNow()
			row := keyRow{Upstream: up.name, Host: up.base.Scheme + "://" + up.base.Host, RequestsHeadroom: h.Requests, TokensHeadroom: h.Tokens, Known: h.Known,
				CoolingUntil: time.Unix(0, up.coolingUntil.Load())}
			if up.pool != "" { // a single key's figures are the upstream's: its events name no key
				row.Upstream, row.Key = up.pool, up.keyVar
			}
			if up.coolingUntil.Load() == 0 || !row.CoolingUntil.After(time.Now()) {
				row.CoolingUntil = time.Time{}
			}
			row.Breaker = worst[up.name].String()
			rows = append(rows, row)
		}
	}
	return rows
}
