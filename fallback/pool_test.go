package fallback_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rebound-go/rebound"
	"github.com/rebound-go/rebound/fallback"
)

// keyPool returns a chain over one pooled target per provider, each with
// its headroom, ending with the last resort as a proxy's does.
func keyPool(providers []*provider, headroom []float64, cooldowns fallback.Cooldowns) *fallback.Chain[*http.Request, *http.Response] {
	ch := &fallback.Chain[*http.Request, *http.Response]{LastResort: true, Cooldowns: cooldowns,
		Discard: func(r *http.Response) {
			if r != nil {
				r.Body.Close()
			}
		}}
	for i, p := range providers {
		t := upstream("key"+string(rune('A'+i)), p, rebound.Policy{MaxAttempts: 3, BaseDelay: time.Second})
		t.Pool = "provider"
		h := headroom[i]
		t.Headroom = func() float64 { return h }
		ch.Targets = append(ch.Targets, t)
	}
	return ch
}

func ok() *provider { return &provider{status: 200, body: `{"ok":true}`} }

func rateLimited() *provider {
	return &provider{status: 429, body: `{"error":{"type":"requests","code":"rate_limit_exceeded","message":"Rate limit reached"}}`,
		header: http.Header{"Retry-After": {"30"}}}
}

func TestPooledTargetsAreTriedByHeadroomMostFirst(t *testing.T) {
	a, b, c := ok(), ok(), ok()
	ch := keyPool([]*provider{a, b, c}, []float64{0.2, 0.9, 0.5}, nil)
	res, err := ch.Do(context.Background(), newRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	res.Value.Body.Close()
	if res.Target != "keyB" || a.hits.Load()+c.hits.Load() != 0 {
		t.Errorf("answered by %s (hits %d %d %d), want keyB, the most headroom, alone", res.Target, a.hits.Load(), b.hits.Load(), c.hits.Load())
	}
}

func TestPooledTargetCoolingDownIsSkippedForTheNextByHeadroom(t *testing.T) {
	a, b, c := ok(), ok(), ok()
	cool := &fallback.MemoryCooldowns{}
	cool.Start(context.Background(), "keyB", time.Now(), time.Hour)
	ch := keyPool([]*provider{a, b, c}, []float64{0.2, 0.9, 0.5}, cool)
	res, err := ch.Do(context.Background(), newRequest(t))
	if err != nil {
		t.Fatal(err)
	}
	res.Value.Body.Close()
	if res.Target != "keyC" || b.hits.Load() != 0 {
		t.Errorf("answered by %s (keyB hit %d times), want keyC with keyB cooling down", res.Target, b.hits.Load())
	}
}

func TestPooledTargetOutOfQuotaIsNotTheLastResort(t *testing.T) {
	// keyC, cooling down and last in the pool, is not heard out as the
	// last resort: keyA is, and its own 429 is the answer after its
	// retries.
	a, b, c := rateLimited(), rateLimited(), ok()
	cool := &fallback.MemoryCooldowns{}
	cool.Start(context.Background(), "keyC", time.Now(), time.Hour)
	ch := keyPool([]*provider{a, b, c}, []float64{0.2, 0.9, 0.5}, cool)
	synctest.Test(t, func(t *testing.T) {
		res, err := ch.Do(context.Background(), newRequest(t))
		if err == nil {
			t.Fatal("answered, want the last resort's 429")
		}
		if res.Value == nil || res.Value.StatusCode != 429 {
			t.Fatalf("value %v, want keyA's 429", res.Value)
		}
		res.Value.Body.Close()
	})
	if c.hits.Load() != 0 || b.hits.Load() != 1 || a.hits.Load() < 2 {
		t.Errorf("hits A %d B %d C %d, want B once (moved on), A retried (the last resort), C never (cooling down)", a.hits.Load(), b.hits.Load(), c.hits.Load())
	}
}

func TestRateLimitedPooledTargetMovesToTheNextBeforeAnyWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := rateLimited(), ok()
		ch := keyPool([]*provider{a, b}, []float64{0.9, 0.1}, nil)
		start := time.Now()
		res, err := ch.Do(context.Background(), newRequest(t))
		if err != nil {
			t.Fatal(err)
		}
		res.Value.Body.Close()
		if waited := time.Since(start); waited != 0 || res.Target != "keyB" || a.hits.Load() != 1 {
			t.Errorf("answered by %s after %v, keyA hit %d times; want keyB at once after keyA's one 429", res.Target, waited, a.hits.Load())
		}
	})
}

func TestRateLimitedTargetOutsideAPoolWaitsAndRetries(t *testing.T) {
	// The same two targets, not pooled: the 429 is retried under the
	// first one's policy after the server's 30 s, as outside a pool.
	synctest.Test(t, func(t *testing.T) {
		a, b := rateLimited(), ok()
		ch := keyPool([]*provider{a, b}, []float64{0.9, 0.1}, nil)
		for i := range ch.Targets {
			ch.Targets[i].Pool = ""
		}
		start := time.Now()
		res, err := ch.Do(context.Background(), newRequest(t))
		if err != nil {
			t.Fatal(err)
		}
		res.Value.Body.Close()
		if waited := time.Since(start); waited < 30*time.Second || a.hits.Load() < 2 {
			t.Errorf("waited %v, keyA hit %d times; want keyA retried after the server's 30 s", waited, a.hits.Load())
		}
	})
}

func TestPooledTargetsOfEqualHeadroomTakeTurns(t *testing.T) {
	a, b, c := ok(), ok(), ok()
	ch := keyPool([]*provider{a, b, c}, []float64{1, 1, 1}, nil)
	for range 6 {
		res, err := ch.Do(context.Background(), newRequest(t))
		if err != nil {
			t.Fatal(err)
		}
		res.Value.Body.Close()
	}
	if a.hits.Load() != 2 || b.hits.Load() != 2 || c.hits.Load() != 2 {
		t.Errorf("hits %d %d %d, want 2 each: targets that know nothing of their limits take turns", a.hits.Load(), b.hits.Load(), c.hits.Load())
	}
}

// affinePool is a chain over a pool of members named as given, each
// known to conversation affinity by its name, with the headroom, readiness
// and answer of each read from the maps at each call; a request is the
// name of its conversation, and the answer the name of the member that
// took it.
type affinePool struct {
	chain    *fallback.Chain[string, string]
	headroom map[string]float64
	notReady map[string]bool
	fail     map[string]error
	calls    map[string]int
}

func newAffinePool(names ...string) *affinePool {
	p := &affinePool{headroom: map[string]float64{}, notReady: map[string]bool{}, fail: map[string]error{}, calls: map[string]int{}}
	p.chain = &fallback.Chain[string, string]{LastResort: true, QuotaCooldown: time.Minute,
		Conversation: func(conv string) string { return conv }}
	for _, name := range names {
		p.headroom[name] = 1
		p.chain.Targets = append(p.chain.Targets, fallback.Target[string, string]{
			Name: name, Pool: "keys", Affinity: "id-" + name, Policy: rebound.Policy{MaxAttempts: 1},
			Headroom: func() float64 { return p.headroom[name] },
			Ready:    func(string) bool { return !p.notReady[name] },
			Call: func(context.Context, string) (string, error) {
				p.calls[name]++
				return name, p.fail[name]
			},
		})
	}
	return p
}

// do sends one request of conv and returns the member that answered it.
func (p *affinePool) do(t *testing.T, conv string) string {
	t.Helper()
	res, err := p.chain.Do(context.Background(), conv)
	if err != nil {
		t.Fatalf("conversation %q: %v", conv, err)
	}
	return res.Value
}

func TestPoolKeepsAConversationOnOneMember(t *testing.T) {
	p := newAffinePool("A", "B", "C")
	first := p.do(t, "conversation-1")
	for turn := range 8 {
		if got := p.do(t, "conversation-1"); got != first {
			t.Fatalf("turn %d went to %s, the first to %s: a conversation stays on its member", turn+2, got, first)
		}
	}
}

func TestPoolSpreadsConversationsOverItsMembers(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))
	p := newAffinePool("A", "B", "C")
	const conversations = 300
	for range conversations {
		p.do(t, fmt.Sprintf("conversation-%016x", r.Uint64()))
	}
	for name, n := range p.calls {
		if n > conversations/2 || n < conversations/6 {
			t.Errorf("%s took %d of %d conversations (%v), want each a share and none more than half", name, n, conversations, p.calls)
		}
	}
}

// order returns conv's members in the order its requests try them while
// all are alike, by failing each member in turn.
func (p *affinePool) order(t *testing.T, conv string) []string {
	t.Helper()
	var order []string
	for range p.chain.Targets {
		m := p.do(t, conv)
		order = append(order, m)
		p.notReady[m] = true // try the next
	}
	clear(p.notReady)
	return order
}

func TestPoolConversationLeavesAMemberLowOnHeadroomAndComesBack(t *testing.T) {
	p := newAffinePool("A", "B", "C")
	order := p.order(t, "conversation-1")
	own, next := order[0], order[1]
	for name := range p.headroom {
		p.headroom[name] = 0.9
	}
	p.headroom[own] = 0.44 // under half the best's
	if got := p.do(t, "conversation-1"); got != next {
		t.Errorf("with its member under half the best headroom, the conversation went to %s, want %s, the next in its order %v", got, next, order)
	}
	p.headroom[own] = 0.45 // half the best's: it stays
	if got := p.do(t, "conversation-1"); got != own {
		t.Errorf("with its member at half the best headroom, the conversation went to %s, want it back on %s", got, own)
	}
}

func TestPoolConversationLeavesAMemberThatCannotTakeItAtOnceAndComesBack(t *testing.T) {
	p := newAffinePool("A", "B", "C")
	order := p.order(t, "conversation-1")
	own := order[0]
	// Its member, not ready, has the most headroom, but counts for
	// nothing: with order[2] the best, order[1] has more than half of it.
	p.notReady[own] = true
	p.headroom[own], p.headroom[order[1]], p.headroom[order[2]] = 1, 0.3, 0.45
	if got := p.do(t, "conversation-1"); got != order[1] {
		t.Errorf("with its member not ready, the conversation went to %s, want %s, the next in its order %v", got, order[1], order)
	}
	p.notReady[own] = false
	if got := p.do(t, "conversation-1"); got != own {
		t.Errorf("with its member ready again, the conversation went to %s, want it back on %s", got, own)
	}
}

func TestPoolConversationLeavesAMemberCoolingDownAndComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newAffinePool("A", "B", "C")
		order := p.order(t, "conversation-1")
		own := order[0]
		p.fail[own] = noQuota
		if got := p.do(t, "conversation-1"); got != order[1] {
			t.Errorf("with its member out of quota, the conversation went to %s, want %s, the next in its order %v", got, order[1], order)
		}
		delete(p.fail, own)
		calls := p.calls[own]
		if got := p.do(t, "conversation-1"); got != order[1] || p.calls[own] != calls {
			t.Errorf("while its member cools down the conversation went to %s (its member called %d times more), want %s alone", got, p.calls[own]-calls, order[1])
		}
		time.Sleep(time.Minute) // the cool-down ends
		if got := p.do(t, "conversation-1"); got != own {
			t.Errorf("after the cool-down the conversation went to %s, want it back on %s", got, own)
		}
	})
}

func TestPoolsOfTwoReplicasKeepAConversationOnTheSameMember(t *testing.T) {
	// Two chains, no state shared, their members listed in other orders
	// (another replica's config): the member is the conversation's by
	// its Affinity, not its place.
	a, b := newAffinePool("A", "B", "C"), newAffinePool("C", "A", "B")
	for i := range 50 {
		conv := fmt.Sprintf("conversation-%d", i)
		if x, y := a.do(t, conv), b.do(t, conv); x != y {
			t.Errorf("%s went to %s on one replica and %s on the other", conv, x, y)
		}
	}
}

func TestPoolGoesByHeadroomForARequestOfNoConversation(t *testing.T) {
	p := newAffinePool("A", "B", "C")
	for range 6 {
		p.do(t, "")
	}
	if p.calls["A"] != 2 || p.calls["B"] != 2 || p.calls["C"] != 2 {
		t.Errorf("calls %v, want 2 each: requests of no conversation take turns as members of equal headroom do", p.calls)
	}
}

func TestPoolWithAMemberOfNoAffinityGoesByHeadroom(t *testing.T) {
	p := newAffinePool("A", "B", "C")
	p.chain.Targets[1].Affinity = ""
	for range 6 {
		p.do(t, "conversation-1")
	}
	if p.calls["A"] != 2 || p.calls["B"] != 2 || p.calls["C"] != 2 {
		t.Errorf("calls %v, want 2 each: a pool without affinity on every member goes by headroom", p.calls)
	}
}
