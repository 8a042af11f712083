package fallback

import (
	"cmp"
	"encoding/binary"
	"slices"
)

// A pool keeps a conversation on the member that holds the provider's
// prompt cache of it (see Chain.Conversation). The member is chosen by
// rendezvous (highest random weight) hashing: each member's weight for a
// conversation is a hash of the two names, and the conversation's members
// are taken in order of their weights. Every replica computes the same
// weights from the same names, with nothing shared; a member that goes
// moves only the conversations it held, each to its next member; and
// conversations spread over the members as their hashes do.

// The tiers of a pool's members for a request of a conversation, in the
// order they are tried.
const (
	tierKeeps    = iota // can take it, at once, with headroom enough: by weight
	tierLow             // can take it at once, but short of headroom: by headroom
	tierNotReady        // would wait: by headroom
	tierCooling         // cooling down: by headroom
)

// arrangeAffine sorts members, a pool's, for a request of the conversation
// conv, each member's cooling and headroom known, asking each member's
// Ready of req.
func (d *chainCall[Req, Resp]) arrangeAffine(members []ranked, conv string, req Req) {
	best := 0.0
	for k := range members {
		m := &members[k]
		t := &d.c.Targets[m.i]
		m.weight = rendezvous(conv, t.Affinity)
		m.ready = !m.cooling && (t.Ready == nil || t.Ready(req))
		if m.ready {
			best = max(best, m.headroom)
		}
	}
	for k := range members {
		m := &members[k]
		switch {
		case m.cooling:
			m.tier = tierCooling
		case !m.ready:
			m.tier = tierNotReady
		case m.headroom*2 >= best:
			m.tier = tierKeeps
		default:
			m.tier = tierLow
		}
	}
	slices.SortFunc(members, func(a, b ranked) int {
		if c := cmp.Compare(a.tier, b.tier); c != 0 {
			return c
		}
		if a.tier != tierKeeps {
			if c := cmp.Compare(b.headroom, a.headroom); c != 0 {
				return c
			}
		}
		if c := cmp.Compare(b.weight, a.weight); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i) // two members of one Affinity: by place
	})
}

// affine reports whether every member of pool, in targets, has an
// Affinity.
func affine[Req, Resp any](targets []Target[Req, Resp], pool string) bool {
	for _, t := range targets {
		if t.Pool == pool && t.Affinity == "" {
			return false
		}
	}
	return true
}

// rendezvous returns the weight of the member known as affinity for the
// conversation conv: FNV-64a of conv's length (8 bytes, big-endian), conv
// and affinity, through SplitMix64's finalizer, which spreads FNV's last
// bytes over the high bits the weights are compared by. It is part of
// what replicas agree on: a change moves conversations between keys.
func rendezvous(conv, affinity string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(conv)))
	for _, c := range n {
		h = (h ^ uint64(c)) * prime
	}
	for i := range len(conv) {
		h = (h ^ uint64(conv[i])) * prime
	}
	for i := range len(affinity) {
		h = (h ^ uint64(affinity[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
