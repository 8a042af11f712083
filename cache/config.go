package cache

import (
	"errors"
	"fmt"
	"time"
)

// Serve says when a stored answer is served.
type Serve uint8

const (
	// OnFailure serves a stored answer only when the providers failed:
	// every request goes to them as without a cache. It is the zero
	// value.
	OnFailure Serve = iota
	// Always serves an answer younger than Config.TTL without calling a
	// provider, and serves one as OnFailure does up to Config.MaxStale.
	Always
)

var serveNames = [...]string{OnFailure: "on_failure", Always: "always"}

func (s Serve) String() string {
	if int(s) < len(serveNames) {
		return serveNames[s]
	}
	return fmt.Sprintf("Serve(%d)", uint8(s))
}

// MarshalText returns the name of s: "on_failure" or "always".
func (s Serve) MarshalText() ([]byte, error) {
	if int(s) >= len(serveNames) {
		return nil, fmt.Errorf("cache: unknown serve %d", uint8(s))
	}
	return []byte(serveNames[s]), nil
}

// UnmarshalText reads "on_failure" or "always".
func (s *Serve) UnmarshalText(text []byte) error {
	for i, n := range serveNames {
		if string(text) == n {
			*s = Serve(i)
			return nil
		}
	}
	return fmt.Errorf("cache: serve %q is neither \"on_failure\" nor \"always\"", text)
}

// Defaults of Config's fields.
const (
	DefaultTTL      = 5 * time.Minute
	DefaultMaxStale = 24 * time.Hour
	DefaultMaxBytes = 64 << 20
	// MinMaxBytes is the least MaxBytes Validate takes (but zero): one
	// answer of up to 16 KiB.
	MinMaxBytes = 64 << 10
)

// Config says how a Cache serves. Its zero value serves on failure, with
// the defaults below.
type Config struct {
	// Serve says when a stored answer is served. The zero value is
	// OnFailure.
	Serve Serve

	// TTL is how long an answer is served without asking a provider,
	// under Always; OnFailure ignores it. Zero means DefaultTTL, 5
	// minutes.
	TTL time.Duration

	// MaxStale is the age past which an answer is never served, and
	// after which a store lets it go. Zero means DefaultMaxStale, 24
	// hours.
	MaxStale time.Duration

	// MaxBytes bounds the memory store New makes when it is given none:
	// its answers' bodies, headers and keys together. One answer larger
	// than a quarter of it is not kept. Zero means DefaultMaxBytes, 64
	// MiB.
	MaxBytes int64
}

// Validate reports what is wrong with c, in one line: a negative
// duration or size, a MaxBytes under MinMaxBytes, a serve mode it does
// not know, or a TTL past MaxStale.
func (c Config) Validate() error {
	var errs []error
	if int(c.Serve) >= len(serveNames) {
		errs = append(errs, fmt.Errorf("serve %d is neither on_failure nor always", uint8(c.Serve)))
	}
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("ttl %v is negative", c.TTL))
	}
	if c.MaxStale < 0 {
		errs = append(errs, fmt.Errorf("max_stale %v is negative", c.MaxStale))
	}
	switch {
	case c.MaxBytes < 0:
		errs = append(errs, fmt.Errorf("max_bytes %d is negative", c.MaxBytes))
	case c.MaxBytes > 0 && c.MaxBytes < MinMaxBytes:
		// A quarter of it bounds one answer: so small a cache keeps none.
		errs = append(errs, fmt.Errorf("max_bytes %d is under %d, too small to keep an answer", c.MaxBytes, MinMaxBytes))
	}
	if c.TTL >= 0 && c.MaxStale >= 0 && c.TTLOrDefault() > c.MaxStaleOrDefault() {
		errs = append(errs, fmt.Errorf("ttl %v is past max_stale %v", c.TTLOrDefault(), c.MaxStaleOrDefault()))
	}
	if len(errs) == 0 {
		return nil
	}
	return &ConfigError{Errs: errs}
}

// ConfigError is what is wrong with a Config.
type ConfigError struct{ Errs []error }

func (e *ConfigError) Error() string {
	msg := "cache: "
	for i, err := range e.Errs {
		if i > 0 {
			msg += "; "
		}
		msg += err.Error()
	}
	return msg
}

// Unwrap returns the faults one by one.
func (e *ConfigError) Unwrap() []error { return e.Errs }

// TTLOrDefault is TTL, or DefaultTTL when it is zero.
func (c Config) TTLOrDefault() time.Duration {
	if c.TTL == 0 {
		return DefaultTTL
	}
	return c.TTL
}

// MaxStaleOrDefault is MaxStale, or DefaultMaxStale when it is zero.
func (c Config) MaxStaleOrDefault() time.Duration {
	if c.MaxStale == 0 {
		return DefaultMaxStale
	}
	return c.MaxStale
}

// MaxBytesOrDefault is MaxBytes, or DefaultMaxBytes when it is zero.
func (c Config) MaxBytesOrDefault() int64 {
	if c.MaxBytes == 0 {
		return DefaultMaxBytes
	}
	return c.MaxBytes
}

// ErrTooLarge is the error of a Store asked to keep an answer larger than
// it may hold.
var ErrTooLarge = errors.New("cache: answer too large to keep")
