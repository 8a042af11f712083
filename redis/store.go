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
	// Prefix starts every key. Zero means DefaultPrefix ("rebound:").
	Prefix string
	// Timeout bounds each decision's round trip to Redis; past it, local
	// state decides. Zero means DefaultTimeout (5 ms).
	Timeout time.Duration
	// RetryEvery is how often, while Redis is away, one decision tries it
	// again. Zero means DefaultRetryEvery (250 ms).
	RetryEvery time.Duration
	// OnChange, if set, is called once when Redis stops answering (up is
	// false, err says why) and once when it answers again. It must not
	// block.
	OnChange func(up bool, err error)
}

// Store is a connection to the shared state, used by every part of this
// package. It is safe for concurrent use.
type Store struct {
	client     redis.UniversalClient
	prefix     string
	timeout    time.Duration
	retryEvery time.Duration
	onChange   func(bool, error)

	down    atomic.Bool  // Redis did not answer the last decision; changed under mu
	retryAt atomic.Int64 // while down: when (unix ns) a decision may try it again

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
	opt.ContextTimeoutEnabled = true
	opt.DialTimeout = 100 * time.Millisecond
	opt.MaxRetries = -1 // a retry would overrun the decision's timeout
	// Maintenance notifications (a managed Redis announcing failovers) add
	// a command to every new connection, and go-redis v9.23's handling of
	// them races when several connections open at once, as Warm opens
	// them: a store deciding in milliseconds is better without them.
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return Config{Client: redis.NewClient(opt)}, nil
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
var scripts = []*redis.Script{limitScript, allowScript, doneScript, startCooldown, cooldownLeft, claimScript, readScript, extendScript, completeScript, releaseScript, timeScript, capScript}

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
// ErrUnavailable at once. A failure to answer marks Redis away; an answer
// marks it back. Errors of the script itself (redis.Nil included) are
// answers.
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
	if err != nil && !isAnswer(err) {
		s.wentAway(err)
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.cameBack()
	return res, err
}

// isAnswer reports whether err is Redis's answer to the script, rather
// than a failure to reach it or a Redis that cannot serve: a Redis out of
// memory, read-only, busy with another script or loading its data is away
// for this decision, as a dead one is.
func isAnswer(err error) bool {
	if err == redis.Nil {
		return true
	}
	var re redis.Error
	if !errors.As(err, &re) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	msg := re.Error()
	for _, prefix := range cannotServe {
		if strings.HasPrefix(msg, prefix) {
			return false
		}
	}
	return true
}

// cannotServe are the prefixes of the errors of a Redis that is up but
// cannot serve a script that writes.
var cannotServe = []string{"OOM", "READONLY", "BUSY", "LOADING", "MASTERDOWN", "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN", "MISCONF"}

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
