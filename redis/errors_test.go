package reboundredis

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rebound-go/rebound/breaker"
	"github.com/rebound-go/rebound/ratelimit"
)

// heard keeps what a Store's OnChange was told.
type heard struct {
	mu      sync.Mutex // guards changes
	changes []change
}

type change struct {
	up  bool
	err error
}

func (h *heard) onChange(up bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.changes = append(h.changes, change{up, err})
}

// check fails the test unless OnChange heard exactly the ups given, the
// first of them (Redis away) with an error that says cause.
func (h *heard) check(t *testing.T, cause string, ups ...bool) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	ok := len(h.changes) == len(ups)
	for i := 0; ok && i < len(ups); i++ {
		ok = h.changes[i].up == ups[i]
	}
	if ok && len(ups) > 0 && (h.changes[0].err == nil || !strings.Contains(h.changes[0].err.Error(), cause)) {
		ok = false
	}
	if !ok {
		t.Errorf("OnChange heard %+v; want %v, the first saying %s", h.changes, ups, cause)
	}
}

// TestForeignKeyIsReportedAway: a key of another type where a part's key
// lives makes its script fail with WRONGTYPE. That is not a decision: the
// part decides locally, OnChange hears that Redis is away and why, the
// store counts the error, and once the key is gone the next decision is
// shared again. (Cooldowns cannot meet it: SET and PTTL take a key of any
// type.)
func TestForeignKeyIsReportedAway(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		part string
		// build makes the part on s and returns the key a foreign list is
		// put at, and a decision that reports whether it was shared.
		build func(t *testing.T, s *Store) (key string, decide func() (shared bool))
	}{
		{"breaker", func(t *testing.T, s *Store) (string, func() bool) {
			b := NewBreaker(s, "gpt-x", breaker.Config{ConsecutiveFailures: 1})
			return b.keys[0], func() bool {
				p, err := b.Allow()
				if err != nil {
					t.Fatalf("Allow: %v", err)
				}
				return p&3 != permitLocal
			}
		}},
		{"cap", func(t *testing.T, s *Store) (string, func() bool) {
			c := s.Cap("tenant", CapConfig{USD: 1})
			return c.state().keys[0], func() bool {
				// Locally this replica has no share yet: a refusal.
				_, err := c.Reserve(ctx, 0.1)
				return err == nil
			}
		}},
		{"limiter", func(t *testing.T, s *Store) (string, func() bool) {
			l := NewLimiter(s, "model", ratelimit.Config{RequestsPerMinute: 6})
			return l.keys[0], func() bool {
				_, _, err := l.decide(ctx, "allow", 1, -1)
				return err == nil
			}
		}},
		{"records", func(t *testing.T, s *Store) (string, func() bool) {
			r, err := NewRecords(s, RecordsConfig{})
			if err != nil {
				t.Fatal(err)
			}
			return s.key("call", "k"), func() bool {
				c, err := r.Claim(ctx, "k", time.Minute)
				if err != nil || c.Token == "" {
					t.Fatalf("a claim: %+v %v; want it claimed, here or on Redis", c, err)
				}
				r.Release(ctx, "k", c.Token)
				return strings.HasPrefix(c.Token, sharedToken)
			}
		}},
	} {
		t.Run(tc.part, func(t *testing.T) {
			cfg := testConfig(t, redisURL())
			cfg.RetryEvery = time.Nanosecond // the decision after the key is gone tries Redis
			var h heard
			cfg.OnChange = h.onChange
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			key, decide := tc.build(t, s)
			if err := cfg.Client.RPush(ctx, key, "not rebound's").Err(); err != nil {
				t.Fatal(err)
			}
			if decide() {
				t.Error("a decision was shared on a key of another type")
			}
			h.check(t, "WRONGTYPE", false)
			h.check(t, key, false) // which key, for the operator to find
			if n := s.Stats().Errors; n != 1 {
				t.Errorf("Stats().Errors = %d; want 1", n)
			}
			cfg.Client.Del(ctx, key)
			if !decide() {
				t.Error("the key gone, the next decision was not shared")
			}
			h.check(t, "WRONGTYPE", false, true)
		})
	}
}

// replyError is an error reply as Redis sends one: go-redis's own type is
// internal, and anything with a RedisError method is a redis.Error.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// noScripts answers every EVALSHA and EVAL with NOSCRIPT, as a proxy that
// does not pass scripts on may: reloading the script (go-redis's EVAL
// after a NOSCRIPT) does not cure it.
type noScripts struct{ evalsha, eval atomic.Int64 }

func (n *noScripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (n *noScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (n *noScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "evalsha":
			n.evalsha.Add(1)
		case "eval":
			n.eval.Add(1)
		default:
			return next(ctx, cmd)
		}
		err := replyError("NOSCRIPT No matching script. Please use EVAL.")
		cmd.SetErr(err)
		return err
	}
}

// TestNoScriptThatReloadingDoesNotCureIsAway: a script Redis will not run,
// even sent whole, gives no decision: Redis is reported away, and the
// error counted.
func TestNoScriptThatReloadingDoesNotCureIsAway(t *testing.T) {
	cfg := testConfig(t, redisURL())
	var h heard
	cfg.OnChange = h.onChange
	var hook noScripts
	cfg.Client.AddHook(&hook)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLimiter(s, "model", ratelimit.Config{RequestsPerMinute: 6})
	if !l.Allow(1) {
		t.Error("the local burst refused the first call")
	}
	if hook.evalsha.Load() != 1 || hook.eval.Load() != 1 {
		t.Errorf("%d EVALSHA and %d EVAL sent; want the script tried by its hash, then sent whole", hook.evalsha.Load(), hook.eval.Load())
	}
	h.check(t, "NOSCRIPT", false)
	if n := s.Stats().Errors; n != 1 {
		t.Errorf("Stats().Errors = %d; want 1", n)
	}
}

// TestAnswerThatIsNotADecisionIsAway: an answer no script of this package
// gives (something between this process and Redis, a Redis that does not
// run the scripts as written) is no decision either: the part decides
// locally, Redis is reported away with the answer, and it is counted.
func TestAnswerThatIsNotADecisionIsAway(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		part string
		// decide makes a decision with a part on s and reports whether
		// it was shared.
		decide func(t *testing.T, s *Store) (shared bool)
	}{
		{"breaker", func(t *testing.T, s *Store) bool {
			p, err := NewBreaker(s, "gpt-x", breaker.Config{}).Allow()
			return err != nil || p&3 != permitLocal
		}},
		{"cap", func(t *testing.T, s *Store) bool {
			_, err := s.Cap("tenant", CapConfig{USD: 1}).Reserve(ctx, 0.1)
			return err == nil // locally this replica has no share: a refusal
		}},
		{"cooldowns", func(t *testing.T, s *Store) bool {
			return NewCooldowns(s).Cooling(ctx, "gpt-x", time.Now())
		}},
		{"limiter", func(t *testing.T, s *Store) bool {
			_, _, err := NewLimiter(s, "model", ratelimit.Config{RequestsPerMinute: 6}).decide(ctx, "allow", 1, -1)
			return err == nil
		}},
	} {
		t.Run(tc.part, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var f fakeRedis
				f.answers(func(string, redis.Cmder) any { return "OK" })
				var h heard
				s, closeClient := fakeStore(t, Config{OnChange: h.onChange}, &f)
				defer closeClient()
				if tc.decide(t, s) {
					t.Error("an answer that is not a decision was taken for one")
				}
				h.check(t, "not a decision", false)
				if n := s.Stats().Errors; n != 1 {
					t.Errorf("Stats().Errors = %d; want 1", n)
				}
			})
		})
	}
}
