package reboundredis

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults of a zero Config.
const (
	DefaultPrefix     = "rebound:"
	DefaultTimeout    = 5 * time.Millisecond
	DefaultRetryEvery = 250 * time.Millisecond
)

// ErrUnavailable is what a decision meets while Redis is away: the part
// that asked decides locally instead.
var ErrUnavailable = errors.New("reboundredis: redis is unavailable")

// Config says where the shared state lives.
type Config struct {
	// Client is the Redis client. It must bound its commands by their
	// context's deadline (redis.Options.ContextTimeoutEnabled), or a
	// Redis that stops answering could hold a call: Open sets it.
	Client redis.UniversalClient
	// Prefix starts every key. Zero means DefaultPrefix ("rebound:"). A
	// prefix may hold a hash tag of its own ("app{1}:"), which puts every
	// key in one cluster slot; New refuses one whose first "{" is followed
	// at once by "}", which would spread a decision's keys over slots.
	Prefix string
	// Timeout bounds each decision's round trip to Redis; past it, local
	// state decides. Zero means DefaultTimeout (5 ms).
	Timeout time.Duration
	// RetryEvery is how often, while Redis is away, one decision tries it
	// again. Zero means DefaultRetryEvery (250 ms).
	RetryEvery time.Duration
	// OnChange, if set, is called once when Redis goes away (up is false,
	// err says why: no answer in time, or an error reply that is not a
	// decision) and once when it answers again. It must not block.
	OnChange func(up bool, err error)
}

// Stats are what a Store has met since it was made.
type Stats struct {
	// Errors counts the round trips to Redis that gave no decision: Redis
	// did not answer within the Timeout, or answered with an error (a key
	// of another type where this package's key lives, a script it will
	// not run, a Redis out of memory or read-only). Each took Redis for
	// away, and the part that asked decided on local state.
	Errors uint64
}

// Store is a connection to the shared state, used by every part of this
// package. It is safe for concurrent use.
type Store struct {
	client     redis.UniversalClient
	prefix     string
	timeout    time.Duration
	retryEvery time.Duration
	onChange   func(bool, error)

	down    atomic.Bool   // Redis did not answer the last decision; changed under mu
	retryAt atomic.Int64  // while down: when (unix ns) a decision may try it again
	errs    atomic.Uint64 // Stats.Errors

	mu sync.Mutex // serialises changes of down and their reports
}

// Open connects to the Redis at url (redis://host:port/db) with options
// fit for decisions made in milliseconds, and returns a Config to complete.
func Open(url string) (Config, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		// go-redis quotes the URL, password and all; a URL that does
		// not parse says nothing of where its password is, and is not
		// shown at all.
		msg := err.Error()
		if u, perr := neturl.Parse(url); perr == nil && u.User != nil {
			if pw, ok := u.User.Password(); ok && pw != "" {
				msg = strings.ReplaceAll(msg, pw, "xxxxx")
			}
		} else if perr != nil && strings.Contains(url, "@") {
			msg = "the URL does not parse (not shown: it may carry a password)"
		}
		return Config{}, errors.New("reboundredis: " + msg)
	}
	decisionOptions(opt)
	return Config{Client: redis.NewClient(opt)}, nil
}

// decisionOptions sets opt for decisions made in milliseconds.
func decisionOptions(opt *redis.Options) {
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = 100 * time.Millisecond
	opt.MaxRetries = -1 // a retry would overrun the decision's timeout
	// Maintenance notifications (a managed Redis announcing failovers) add
	// a command to every new connection, and go-redis v9.23's handling of
	// them races when several connections open at once, as Warm opens
	// them: a store deciding in milliseconds is better without them.
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// New returns a Store for cfg.
func New(cfg Config) (*Store, error) {
	if cfg.Client == nil {
		return nil, errors.New("reboundredis: Config.Client is nil")
	}
	if !boundsByContext(cfg.Client) {
		return nil, errors.New("reboundredis: the client does not bound commands by their context (set ContextTimeoutEnabled in its options)")
	}
	if cfg.Timeout < 0 || cfg.RetryEvery < 0 {
		return nil, fmt.Errorf("reboundredis: negative Timeout (%v) or RetryEvery (%v)", cfg.Timeout, cfg.RetryEvery)
	}
	if i := strings.IndexByte(cfg.Prefix, '{'); i >= 0 && strings.HasPrefix(cfg.Prefix[i:], "{}") {
		return nil, fmt.Errorf("reboundredis: Config.Prefix %q opens an empty hash tag (\"{}\"): a cluster would hash each key whole and spread a decision's keys over slots", cfg.Prefix)
	}
	s := &Store{client: cfg.Client, prefix: cfg.Prefix, timeout: cfg.Timeout, retryEvery: cfg.RetryEvery, onChange: cfg.OnChange}
	if s.prefix == "" {
		s.prefix = DefaultPrefix
	}
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	if s.retryEvery == 0 {
		s.retryEvery = DefaultRetryEvery
	}
	return s, nil
}

// Warm makes the client ready for decisions: it opens the client's
// connections, up to its pool size, and loads this package's scripts.
// Call it once before the first decisions, with a context that gives a
// few connections' time (a second or two). Without it, each of the first
// concurrent decisions opens its own connection (a dial and a handshake of
// several round trips) within its Timeout, and a script's first run sends
// it whole: twenty at once on an idle local Redis take longer than the
// default 5 ms, and the store would take Redis for away. A Ping warms one
// connection only.
//
// An error says that Redis did not answer; the store then decides as
// usual, and finds out for itself when Redis is back.
func (s *Store) Warm(ctx context.Context) error {
	var clients []*redis.Client
	var mu sync.Mutex // guards clients while a cluster or ring lists its shards
	collect := func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		clients = append(clients, c)
		return nil
	}
	switch c := s.client.(type) {
	case *redis.Client:
		clients = append(clients, c)
	case *redis.ClusterClient:
		if err := c.ForEachShard(ctx, collect); err != nil {
			return fmt.Errorf("reboundredis: warming the connections: %w", err)
		}
	case *redis.Ring:
		if err := c.ForEachShard(ctx, collect); err != nil {
			return fmt.Errorf("reboundredis: warming the connections: %w", err)
		}
	default:
		// A client of a kind this package does not know: its pool is its
		// own business, the scripts are still worth loading.
	}
	// All at once: each connection is borrowed, pinged and held until
	// every other one is open, so that the pool dials anew for each rather
	// than lending the same one again.
	var conns []*redis.Conn
	for _, c := range clients {
		for range c.Options().PoolSize {
			conns = append(conns, c.Conn())
		}
	}
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for _, cn := range conns {
		wg.Go(func() {
			if err := cn.Ping(ctx).Err(); err != nil {
				select {
				case errs <- err:
				default:
				}
			}
		})
	}
	wg.Wait()
	for _, cn := range conns {
		cn.Close() // back to the pool, open
	}
	select {
	case err := <-errs:
		return fmt.Errorf("reboundredis: warming the connections: %w", err)
	default:
	}
	for _, script := range scripts {
		if err := script.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("reboundredis: loading a script: %w", err)
		}
	}
	return nil
}

// scripts are the package's scripts, which Warm loads.
var scripts = []*redis.Script{limitScript, allowScript, doneScript, startCooldown, cooldownLeft, claimScript, readScript, extendScript, completeScript, releaseScript, timeScript, capScript, capSpentScript, cacheGet, cacheSet}

// boundsByContext reports whether c ends a command at its context's
// deadline. A client of a kind this package does not know is taken at its
// word.
func boundsByContext(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return true
}

// Stats returns what the store has met since it was made.
func (s *Store) Stats() Stats {
	return Stats{Errors: s.errs.Load()}
}

// tagEscaper escapes the bytes of a name that would end a hash tag early
// or open another ({ and }), and the escape itself, so that escaping stays
// one-to-one.
var tagEscaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// hashTag returns name as the hash tag of the keys one decision touches:
// a Redis Cluster keeps every key whose first {…} is the same in one slot,
// so that one script may use them all. A name without braces or % is its
// own tag, as in earlier versions; the empty name, whose {} a cluster
// would not take for a tag, is -{-}, which no other name's tag is.
func hashTag(name string) string {
	if name == "" {
		return "-{-}"
	}
	return "{" + tagEscaper.Replace(name) + "}"
}

// key returns the key of name under the store's prefix.
func (s *Store) key(parts ...string) string {
	k := s.prefix
	for i, p := range parts {
		if i > 0 {
			k += ":"
		}
		k += p
	}
	return k
}

// run runs a script with the store's timeout, unless Redis is known to be
// away and it is not yet time to try it again; then it returns
// ErrUnavailable at once. An answer marks Redis back. Anything else marks
// it away, and is counted: no answer in time, and every error reply, which
// this package's scripts never give as a decision (a key of another type,
// a script Redis will not run, a Redis that cannot write). Only redis.Nil,
// a script's empty answer, is an answer.
func (s *Store) run(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	return s.runFor(ctx, s.timeout, script, keys, args...)
}

// runFor is run with its own timeout, for a round trip that carries more
// than a decision's few bytes.
func (s *Store) runFor(ctx context.Context, timeout time.Duration, script *redis.Script, keys []string, args ...any) (any, error) {
	if s.down.Load() {
		at := s.retryAt.Load()
		if time.Now().UnixNano() < at || !s.retryAt.CompareAndSwap(at, time.Now().Add(s.retryEvery).UnixNano()) {
			return nil, ErrUnavailable
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	res, err := script.Run(ctx, s.client, keys, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		if len(keys) > 0 {
			err = fmt.Errorf("%w (key %s)", err, s.shownKey(keys[0])) // for the operator to find a foreign key
		}
		return nil, s.noDecision(err)
	}
	s.cameBack()
	return res, err
}

// payloadTimeout is the Store's Timeout and a millisecond more for each
// 64 KiB of n bytes carried.
func (s *Store) payloadTimeout(n int) time.Duration {
	return s.timeout + time.Duration(n>>16)*time.Millisecond
}

// shownKey is key as an error shows it. A cached answer's key is a hash of
// its request, which stays out of logs: its prefix alone is shown.
func (s *Store) shownKey(key string) string {
	if p := s.key(cacheKeys, ""); strings.HasPrefix(key, p) {
		return p + "…"
	}
	return key
}

// readTimeout is the least a read for a person (Cap.Spent) waits for
// Redis: no decision waits on it, so it may wait longer than one.
const readTimeout = 50 * time.Millisecond

// read runs a script that reads for a person rather than decides: it asks
// Redis even while the store deems it away, waiting up to readTimeout or
// the store's timeout if longer. An answer marks Redis back; a failure
// leaves the store as it was, since a slow page is no reason for every
// decision to go local.
func (s *Store) read(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.timeout, readTimeout))
	defer cancel()
	res, err := script.Run(ctx, s.client, keys, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: %w (key %s)", ErrUnavailable, err, keys[0])
	}
	s.cameBack()
	return res, err
}

// unreadable is what a part calls on an answer of a script that is not a
// decision: none of this package's scripts gives one, so something stands
// between this process and Redis, or runs the scripts otherwise. It is
// away, as an error reply is. It returns the error the part decides
// locally on.
func (s *Store) unreadable(res any) error {
	answer := fmt.Sprintf("%#v", res)
	if len(answer) > 100 {
		answer = answer[:100] + "…"
	}
	return s.noDecision(errors.New("reboundredis: an answer that is not a decision: " + answer))
}

// noDecision counts a round trip that gave no decision, and marks Redis
// away for it.
func (s *Store) noDecision(err error) error {
	s.errs.Add(1)
	s.wentAway(err)
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// wentAway and cameBack move the store between "Redis answers" and
// "Redis is away"; the move and its report happen under mu, so that
// OnChange's last word is always the store's state.
func (s *Store) wentAway(err error) {
	s.retryAt.Store(time.Now().Add(s.retryEvery).UnixNano())
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down.Swap(true) {
		s.report(false, err)
	}
}

func (s *Store) cameBack() {
	if !s.down.Load() {
		return // the common case, without the lock
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down.Swap(false) {
		s.report(true, nil)
	}
}

// report tells OnChange of a change; mu is held.
func (s *Store) report(up bool, err error) {
	if s.onChange != nil {
		s.onChange(up, err)
	}
}
