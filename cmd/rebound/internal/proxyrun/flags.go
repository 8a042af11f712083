package proxyrun

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rebound-go/rebound/cmd/rebound/internal/cliflag"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
	"github.com/rebound-go/rebound/proxy"
	reboundredis "github.com/rebound-go/rebound/redis"
)

// Flags are the flags of "rebound proxy": those read straight into the
// Config, and those that say where its keys, tokens and config file come
// from.
type Flags struct {
	c                                                  Config
	keyEnv, configFile, tokenEnv, tokensFile, redisEnv string
	adminTokenEnv                                      string
	attemptTimeout                                     time.Duration
}

// DefineFlags defines the flags of "rebound proxy" on fs, with their
// defaults, and returns where they are parsed into.
func DefineFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	c := &f.c
	o := &c.Options
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8080", "listen on `host:port` (port 0 picks a free port); a non-loopback address needs client tokens")
	fs.StringVar(&o.Upstream, "upstream", "", "forward every request to this base `URL`")
	fs.StringVar(&f.keyEnv, "key-env", "", "with --upstream: the environment `variable` holding the upstream's key, which replaces the client's")
	fs.StringVar(&f.configFile, "config", "", "JSON config `file`: upstreams, routes, fallbacks, policies")
	fs.StringVar(&f.tokenEnv, "token-env", "", "environment `variable` holding the client tokens, comma-separated")
	fs.StringVar(&f.tokensFile, "tokens-file", "", "`file` of client tokens, one a line")
	fs.StringVar(&f.adminTokenEnv, "admin-token-env", "", "environment `variable` holding the admin token, which opens /ui and /metrics to requests from beyond this machine (Authorization: Bearer, or the password a browser asks for); not a client token")
	fs.Int64Var(&o.MaxBody, "max-body", proxy.DefaultMaxBody, "largest request body in `bytes`; a larger one gets a 413")
	fs.Int64Var(&o.MaxBodyMemory, "max-body-memory", 0, "bound on the memory of all request bodies in flight together, in `bytes`, at least twice the largest body cap (0: a quarter of the machine's memory, at most 1 GiB)")
	fs.Var((*cliflag.List)(&o.AllowHosts), "allow-host", "without client tokens, answer requests for this host `name` too, besides loopback names (repeatable, or comma-separated)")
	fs.Var((*cliflag.List)(&o.AllowOrigins), "allow-origin", "let web pages of this `origin` (https://app.example.com) call the proxy, with CORS headers (repeatable, or comma-separated; * only with client tokens)")
	fs.DurationVar(&c.Drain, "drain-timeout", 30*time.Second, "how long requests in flight may finish after SIGTERM, and calls to an MCP server a reload removes or changes")
	fs.StringVar(&c.Redis, "redis", "", "share limits, breakers, cool-downs and cached answers with other replicas on this Redis `URL` (one with a password: --redis-env)")
	fs.StringVar(&f.redisEnv, "redis-env", "", "as --redis, with the URL (and its password) in this environment `variable`, out of ps's sight")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", reboundredis.DefaultPrefix, "with --redis: the `prefix` of every key the proxy keeps there (deployments sharing a Redis but not their state use their own)")
	fs.DurationVar(&c.RedisTimeout, "redis-timeout", reboundredis.DefaultTimeout, "with --redis: how long a decision waits for Redis before the replica decides alone (a Redis across a network may need more than the default)")
	fs.IntVar(&c.Replicas, "replicas", 1, "with --redis: how many proxy `processes` share it; while Redis is away each may spend 1/N of what is left of a tenant's spend cap")
	fs.DurationVar(&f.attemptTimeout, "attempt-timeout", 0, "bound each attempt, its body read included (0: none but the client's)")
	fs.DurationVar(&o.MaxQueueWait, "max-queue-wait", proxy.DefaultMaxQueueWait, "how long a request may wait for a slot of its upstream's limit on requests in flight (then a 503), or for its learnt rate limits (then a 429)")
	return f
}

// Config checks the parsed flags and returns the proxy they ask for,
// filled in from the environment and from files: the keys, the tokens,
// the config. An error is bad usage, in one line.
func (f *Flags) Config() (Config, error) {
	c := f.c
	if err := f.complete(&c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// complete checks c's flags and fills in from f what they leave to the
// environment and to files: the keys, the tokens, the config.
func (f *Flags) complete(c *Config) error {
	o := &c.Options
	switch {
	case o.Upstream == "" && f.configFile == "":
		return errors.New("give --upstream URL or --config FILE")
	case o.Upstream != "" && f.configFile != "":
		return errors.New("--upstream and --config both given: the config names the upstreams")
	case f.keyEnv != "" && o.Upstream == "":
		return errors.New("--key-env goes with --upstream (a config names its keys' variables)")
	case o.MaxBody <= 0:
		return fmt.Errorf("--max-body %d: want a positive number of bytes", o.MaxBody)
	case o.MaxBodyMemory < 0:
		return fmt.Errorf("--max-body-memory %d: want a positive number of bytes (0: the default)", o.MaxBodyMemory)
	case o.MaxBodyMemory > 0 && o.MaxBodyMemory/2 < o.MaxBody:
		return fmt.Errorf("--max-body-memory %d: want at least twice --max-body (%d)", o.MaxBodyMemory, o.MaxBody)
	case c.Drain < 0:
		return fmt.Errorf("--drain-timeout %v is negative", c.Drain)
	case f.attemptTimeout < 0:
		return fmt.Errorf("--attempt-timeout %v is negative", f.attemptTimeout)
	case o.MaxQueueWait <= 0:
		return fmt.Errorf("--max-queue-wait %v: want a positive duration", o.MaxQueueWait)
	case c.Redis != "" && f.redisEnv != "":
		return errors.New("--redis and --redis-env both given")
	case c.Replicas < 1 || c.Replicas > 10000:
		return fmt.Errorf("--replicas %d: want a number of processes from 1 to 10000", c.Replicas)
	case c.RedisTimeout <= 0 || c.RedisTimeout > 10*time.Second:
		return fmt.Errorf("--redis-timeout %v: want a duration above zero and at most 10s (a call waits that long for each decision)", c.RedisTimeout)
	case c.RedisPrefix == "":
		return errors.New("--redis-prefix is empty: give a prefix, e.g. rebound:")
	}
	if f.redisEnv != "" {
		if c.Redis = os.Getenv(f.redisEnv); c.Redis == "" {
			return fmt.Errorf("--redis-env: environment variable %s is not set", f.redisEnv)
		}
	}
	host, err := serve.CheckAddr(c.Addr)
	if err != nil {
		return err
	}
	if o.Tokens, err = ReadTokens(f.tokenEnv, f.tokensFile); err != nil {
		return err
	}
	if !serve.IsLoopback(host) && len(o.Tokens) == 0 {
		return fmt.Errorf("--addr %s is not a loopback address: give client tokens (--token-env or --tokens-file)", c.Addr)
	}
	c.AdminOff = !serve.IsLoopback(host) && f.adminTokenEnv == ""
	c.ConfigFile = f.configFile
	if f.adminTokenEnv != "" {
		if o.AdminToken = strings.TrimSpace(os.Getenv(f.adminTokenEnv)); o.AdminToken == "" {
			return fmt.Errorf("--admin-token-env: environment variable %s is not set", f.adminTokenEnv)
		}
	}
	return f.fill(o)
}

// fill fills in o what the flags take from the environment and from
// files: the upstream's key, the config; and the defaults they leave.
func (f *Flags) fill(o *proxy.Options) error {
	o.Getenv = os.Getenv
	if o.MaxBodyMemory == 0 {
		o.MaxBodyMemory = DefaultBodyMemory()
	}
	if f.keyEnv != "" {
		if o.UpstreamKey = os.Getenv(f.keyEnv); o.UpstreamKey == "" {
			return fmt.Errorf("--key-env: environment variable %s is not set", f.keyEnv)
		}
	}
	if f.configFile != "" {
		data, err := os.ReadFile(f.configFile)
		if err != nil {
			return fmt.Errorf("--config: %v", err)
		}
		if o.Config, err = proxy.ParseConfig(data, os.Getenv); err != nil {
			return err
		}
	}
	if f.attemptTimeout > 0 {
		p := proxy.RecommendedPolicy()
		p.AttemptTimeout = f.attemptTimeout
		o.Policy = &p
	}
	return nil
}
