package batchrun

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rebound-go/rebound"
)

// Config is a run of "rebound batch", as its flags ask for it.
type Config struct {
	// Input is the file of requests; Out and Errors the files of answers
	// and failures (Errors by default Out with .errors.jsonl for .jsonl).
	Input, Out, Errors string
	// Journal is a file or a postgres:// URL (by default Out.journal);
	// BatchName and Schema name the batch and its tables in PostgreSQL
	// (by default Input's file name, and rebound's schema), and Lease how
	// long a worker there holds a request it does not renew (zero: the
	// journal's default).
	Journal, BatchName, Schema string
	Lease                      time.Duration
	// BaseURL is where the requests go (by default the dialect's
	// provider); Dialect says how the key is sent: openai, anthropic or
	// gemini; KeyEnv names the variable holding the key (by default the
	// dialect's).
	BaseURL, Dialect, KeyEnv string
	// PolicyFile holds rebound's policy JSON ("": the recommended
	// policy); MaxAttempts, if not zero, caps the attempts of every kind
	// of failure.
	PolicyFile  string
	MaxAttempts int
	// Concurrency bounds the requests in flight; RPM is the requests a
	// minute the provider allows (zero: learnt from its headers); Redis,
	// if set, shares the rate limits with other processes.
	Concurrency int
	RPM         float64
	Redis       string
	// RetryFailed sends again what failed permanently before; Strict
	// sends nothing if a line of Input is malformed.
	RetryFailed, Strict bool
	// Terminal says that stderr is a terminal: the progress is a bar
	// redrawn in place rather than lines.
	Terminal bool

	dialect dialect        // Dialect's
	policy  rebound.Policy // PolicyFile's, capped at MaxAttempts
	keyEnv  string         // the variable holding the key: KeyEnv, or the dialect's
	key     string         // its value; empty for a server of the user's that takes none
}

// Check fills in c's defaults, reads the key, and returns the first thing
// wrong with it, in one line: the command's usage is wrong.
func (c *Config) Check() error {
	d, ok := dialects[c.Dialect]
	if !ok {
		return fmt.Errorf("unknown --dialect %q (want openai, anthropic or gemini)", c.Dialect)
	}
	c.dialect = d
	if c.Errors == "" {
		c.Errors = strings.TrimSuffix(c.Out, ".jsonl") + ".errors.jsonl"
	}
	if c.Journal == "" {
		c.Journal = c.Out + ".journal"
	}
	if c.BatchName == "" {
		c.BatchName = filepath.Base(c.Input)
	}
	if c.BaseURL == "" {
		c.BaseURL = d.baseURL
	}
	if u, err := url.Parse(c.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("--base-url %q: want http:// or https://, a host and at most a path", c.BaseURL)
	}
	kept := KeptPath(c.Out)
	files := []string{c.Input, c.Out, c.Errors, kept}
	if !IsPostgres(c.Journal) {
		files = append(files, c.Journal)
	}
	if sameFiles(files...) {
		return fmt.Errorf("the input, --out, --errors, --journal and %s must be different files", kept)
	}
	c.policy = rebound.Policy{}
	if c.PolicyFile != "" {
		b, err := os.ReadFile(c.PolicyFile)
		if err != nil {
			return fmt.Errorf("--policy: %v", err)
		}
		if err := json.Unmarshal(b, &c.policy); err != nil {
			return fmt.Errorf("--policy %s: %v", c.PolicyFile, err)
		}
	}
	if c.MaxAttempts > 0 {
		capAttempts(&c.policy, c.MaxAttempts)
	}
	return c.checkKey()
}

// checkKey reads the key from its variable. A variable named by
// --api-key-env must hold one; the dialect's own may be unset only when
// the requests go to a server of the user's (a local model may take no
// key): a provider's own API would refuse every request, and the batch
// would be recorded as failed, permanently, one request at a time.
func (c *Config) checkKey() error {
	c.keyEnv = c.KeyEnv
	if c.keyEnv == "" {
		c.keyEnv = c.dialect.keyEnv
	}
	if c.key = os.Getenv(c.keyEnv); c.key != "" {
		return nil
	}
	u, _ := url.Parse(c.BaseURL) // checked above
	switch {
	case c.KeyEnv != "":
		return fmt.Errorf("--api-key-env %s: the variable is not set", c.KeyEnv)
	case providerHost(u.Hostname()):
		return fmt.Errorf("%s is not set, and %s refuses a request without a key (set it, or name the key's variable with --api-key-env)", c.keyEnv, u.Hostname())
	}
	return nil
}

// providerHost reports whether host is the API of one of the dialects'
// providers, however it is spelled.
func providerHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, d := range dialects {
		if u, _ := url.Parse(d.baseURL); u.Hostname() == host {
			return true
		}
	}
	return false
}

// dialect is how a provider takes its key, and where it is by default.
type dialect struct {
	baseURL, keyEnv string
	header          func(key string) http.Header
}

var dialects = map[string]dialect{
	"openai": {"https://api.openai.com", "OPENAI_API_KEY", func(key string) http.Header {
		return http.Header{"Authorization": {"Bearer " + key}}
	}},
	"anthropic": {"https://api.anthropic.com", "ANTHROPIC_API_KEY", func(key string) http.Header {
		return http.Header{"X-Api-Key": {key}, "Anthropic-Version": {"2023-06-01"}}
	}},
	"gemini": {"https://generativelanguage.googleapis.com", "GEMINI_API_KEY", func(key string) http.Header {
		return http.Header{"X-Goog-Api-Key": {key}}
	}},
}

// capAttempts makes every kind of failure stop at n attempts: the policy's
// own count, and any kind's that the policy gives more.
func capAttempts(p *rebound.Policy, n int) {
	p.MaxAttempts = n
	for k, o := range p.PerKind {
		if o.MaxAttempts == 0 || o.MaxAttempts > n {
			o.MaxAttempts = n
			p.PerKind[k] = o
		}
	}
}
