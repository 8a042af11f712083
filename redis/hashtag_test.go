package reboundredis

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rebound-go/rebound/breaker"
)

// crc16 is the CRC the Redis Cluster spec hashes keys with: CRC-16/XMODEM
// (polynomial 0x1021, initial value 0, no reflection).
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// keySlot is key's slot on a Redis Cluster, by the spec's rule: if the key
// holds a "{" and, after it, a "}" with at least one byte between them,
// only those bytes are hashed; otherwise the whole key is. The test Redis
// runs without cluster support, so CLUSTER KEYSLOT cannot tell.
func keySlot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return crc16([]byte(key)) % 16384
}

// TestKeySlotFollowsTheSpec checks the test's own slot rule against the
// answers of CLUSTER KEYSLOT on a cluster-enabled Redis 7.0.
func TestKeySlotFollowsTheSpec(t *testing.T) {
	for key, want := range map[string]uint16{
		"123456789":     12739, // the spec's check value, 0x31C3
		"somekey":       11058,
		"foo{hash_tag}": 2515,
		"a{}{b}":        15033, // an empty tag: the whole key
		"x{{b}}z":       6215,  // the tag is "{b"
	} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d; CLUSTER KEYSLOT says %d", key, got, want)
		}
	}
}

// hostileNames are names a user may give a breaker or a cap, which a key
// that quotes them as they are would let open, close or empty its hash
// tag.
var hostileNames = []string{"gpt-x", "gpt{x}", "}{", "{}", "}x", "{", "}", "a}b{c}", "{{}}", "", "%7B", "gpt%x"}

// decisionKeys returns, for s and name, the keys each multi-key decision
// touches: a breaker's and a cap's period's.
func decisionKeys(s *Store, name string) map[string][]string {
	return map[string][]string{
		"breaker": NewBreaker(s, name, breaker.Config{}).keys,
		"cap":     s.Cap(name, CapConfig{USD: 1}).state().keys,
	}
}

// TestKeysOfOneDecisionShareOneSlot: whatever the name, and whatever the
// prefix New accepts, every key one script touches hashes to one cluster
// slot, so that a Redis Cluster runs the script rather than refusing it
// (CROSSSLOT).
func TestKeysOfOneDecisionShareOneSlot(t *testing.T) {
	cfg, err := Open(redisURL()) // no command is sent
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Client.Close()
	for _, prefix := range []string{DefaultPrefix, "app{tenant-1}:", "a{", "}{:", "x}y{z:"} {
		cfg.Prefix = prefix
		s, err := New(cfg)
		if err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		for _, name := range hostileNames {
			for part, keys := range decisionKeys(s, name) {
				for _, k := range keys[1:] {
					if keySlot(k) != keySlot(keys[0]) {
						t.Errorf("prefix %q, %s %q: key %q is in slot %d, key %q in slot %d", prefix, part, name, keys[0], keySlot(keys[0]), k, keySlot(k))
					}
				}
			}
		}
	}
}

// TestNewRefusesAPrefixThatEmptiesTheHashTag: a prefix whose first "{" is
// followed at once by "}" makes a cluster hash every key whole, so a
// decision's keys would land in different slots.
func TestNewRefusesAPrefixThatEmptiesTheHashTag(t *testing.T) {
	cfg, err := Open(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	defer cfg.Client.Close()
	for _, prefix := range []string{"{}", "app{}:", "a{}{b}:"} {
		cfg.Prefix = prefix
		if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "Prefix") {
			t.Errorf("prefix %q: New said %v; want it refused", prefix, err)
		}
	}
}

// TestNamesDifferingInBracesKeepApart: names that differ only in braces
// or in what escapes them have keys of their own, and a breaker tripped or
// a cap spent under one leaves the others as they were.
func TestNamesDifferingInBracesKeepApart(t *testing.T) {
	s := testStore(t)
	names := []string{"gpt{x}", "gptx", "gpt{x", "gpt}x", "{gptx}", "gpt%7Bx%7D", "gpt%7Bx}", "gpt%x", "}gptx{", ""}
	owner := map[string]string{} // key → name
	for _, name := range names {
		for _, keys := range decisionKeys(s, name) {
			for _, k := range keys {
				if other, ok := owner[k]; ok {
					t.Errorf("%q and %q share the key %q", other, name, k)
				}
				owner[k] = name
			}
		}
	}
	ctx := context.Background()
	cfg := breaker.Config{ConsecutiveFailures: 1, Cooldown: time.Hour}
	fail(NewBreaker(s, names[0], cfg))
	h, err := s.Cap(names[0], CapConfig{USD: 1}).Reserve(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	h.Settle(1)
	for _, name := range names[1:] {
		if p, err := NewBreaker(s, name, cfg).Allow(); err != nil || p&3 == permitLocal {
			t.Errorf("breaker %q, after %q tripped: %x %v; want a shared permit", name, names[0], p, err)
		}
		if _, err := s.Cap(name, CapConfig{USD: 1}).Reserve(ctx, 0.5); err != nil {
			t.Errorf("cap %q, after %q was spent: %v", name, names[0], err)
		}
	}
}
