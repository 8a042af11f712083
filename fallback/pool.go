package fallback

import (
	"cmp"
	"slices"
)

// coolingState is what a call learnt of a target's cool-down: not asked
// yet, cooling down, or not.
type coolingState uint8

const (
	coolingUnknown coolingState = iota
	coolingYes
	coolingNo
)

// arrange sets the order in which d tries the targets for req: the
// targets of each Pool, in the places they hold in Targets, by their
// Headroom (most first), those cooling down last; members of equal
// headroom take turns. A pool whose members have an Affinity orders them
// for a request of a conversation as arrangeAffine does. It also settles
// the last resort. Without a pool the order is that of Targets, and
// nothing is allocated.
func (d *chainCall[Req, Resp]) arrange(req Req) {
	targets := d.c.Targets
	d.lastTarget = len(targets) - 1
	if !slices.ContainsFunc(targets, func(t Target[Req, Resp]) bool { return t.Pool != "" }) {
		return
	}
	d.order = append(d.orderBuf[:0], make([]int, len(targets))...)
	d.cooling = append(d.coolingBuf[:0], make([]coolingState, len(targets))...)
	for i := range d.order {
		d.order[i] = i
	}
	var (
		membersBuf [smallPool]ranked
		placesBuf  [smallPool]int
		members    = membersBuf[:0]
		places     = placesBuf[:0]
		conv       string
		asked      bool // conv is the call's: the Chain's Conversation is asked once
	)
	for i, t := range targets {
		if t.Pool == "" || slices.ContainsFunc(targets[:i], func(u Target[Req, Resp]) bool { return u.Pool == t.Pool }) {
			continue // not pooled, or its pool is arranged already
		}
		members, places = members[:0], places[:0]
		for j := i; j < len(targets); j++ {
			if targets[j].Pool != t.Pool {
				continue
			}
			r := ranked{i: j, cooling: d.coolingNow(j, req), headroom: 1}
			if h := targets[j].Headroom; h != nil {
				r.headroom = h()
			}
			members, places = append(members, r), append(places, j)
		}
		byConversation := d.c.Conversation != nil && affine(targets, t.Pool)
		if byConversation && !asked {
			conv, asked = d.c.Conversation(req), true
		}
		if byConversation && conv != "" {
			d.arrangeAffine(members, conv, req)
		} else {
			d.arrangeByHeadroom(members)
		}
		for k, m := range members {
			d.order[places[k]] = m.i
		}
	}
	// A pool that ends the chain ends it with its last member that is not
	// cooling down, heard out as the last resort; the members after it
	// are skipped. With every member cooling, the last is heard out.
	end := len(targets) - 1
	d.lastTarget = d.order[end]
	for pos := end; pos >= 0 && targets[d.order[pos]].Pool != "" && targets[d.order[pos]].Pool == targets[d.order[end]].Pool; pos-- {
		if d.cooling[d.order[pos]] != coolingYes {
			d.lastTarget = d.order[pos]
			break
		}
	}
}

// arrangeByHeadroom sorts members, a pool's, by headroom, most first,
// those cooling down last. Members of equal headroom (none known, say: a
// provider that sends no rate-limit headers) take turns at going first:
// the members are rotated by the call's turn (three reversals) before
// the stable sort.
func (d *chainCall[Req, Resp]) arrangeByHeadroom(members []ranked) {
	turn := int(d.c.turn.Add(1) % uint64(len(members)))
	slices.Reverse(members[:turn])
	slices.Reverse(members[turn:])
	slices.Reverse(members)
	slices.SortStableFunc(members, func(a, b ranked) int {
		if a.cooling != b.cooling {
			if a.cooling {
				return 1
			}
			return -1
		}
		return cmp.Compare(b.headroom, a.headroom)
	})
}

// smallPool is the number of targets a call arranges without allocating
// for them.
const smallPool = 4

// ranked is a pool's target as arrange sorts it.
type ranked struct {
	i        int
	cooling  bool
	headroom float64
	// For a request of a conversation (arrangeAffine): the member's
	// rendezvous weight, whether it can take the request at once, and
	// its tier.
	weight uint64
	ready  bool
	tier   int
}

// at returns the target tried in place pos.
func (d *chainCall[Req, Resp]) at(pos int) int {
	if d.order == nil {
		return pos
	}
	return d.order[pos]
}

// coolingNow reports whether target i's call on req is cooling down,
// asking the Cooldowns once a call.
func (d *chainCall[Req, Resp]) coolingNow(i int, req Req) bool {
	return d.coolingOf(i, d.key(i, req))
}

// coolingOf reports whether target i, whose call is named key, is cooling
// down, asking the Cooldowns once a call for a pooled target.
func (d *chainCall[Req, Resp]) coolingOf(i int, key string) bool {
	if d.cooling == nil {
		return d.c.cooldowns().Cooling(d.ctx, key, d.clock.Now())
	}
	if d.cooling[i] == coolingUnknown {
		d.cooling[i] = coolingNo
		if d.c.cooldowns().Cooling(d.ctx, key, d.clock.Now()) {
			d.cooling[i] = coolingYes
		}
	}
	return d.cooling[i] == coolingYes
}

// poolAfter reports whether a target of i's pool that is not cooling down
// is tried after i: a rate-limited answer on i then moves on to it at
// once.
func (d *chainCall[Req, Resp]) poolAfter(i int) bool {
	pool := d.c.Targets[i].Pool
	if pool == "" || d.order == nil || i == d.lastTarget {
		return false
	}
	pos := slices.Index(d.order, i)
	for _, j := range d.order[pos+1:] {
		if d.c.Targets[j].Pool == pool && d.cooling[j] != coolingYes {
			return true
		}
	}
	return false
}
