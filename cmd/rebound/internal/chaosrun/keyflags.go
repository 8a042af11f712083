package chaosrun

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/rebound-go/rebound/chaos"
)

// KeyUsage is the help of the per-key limits of "rebound chaos".
const KeyUsage = `
Per-key limits: with --key-rpm N or --key-tpm N, each API key the server
sees (Authorization: Bearer, x-api-key, x-goog-api-key) is held to N
requests, or N input tokens, per --key-window (a minute unless given; a
short one lets a test see many windows). Every answer to a request with a
key carries the profile's rate-limit headers for that key (openai, azure
and anthropic have them): its limits, what is left of them and when they
reset; a request past a limit gets the profile's rate-limit 429 with a wait
hint until the window ends. --key-quota-exhausted PREFIX,... makes every key
that starts with one of the prefixes out of quota from the start (the
profile's quota 429): a prefix names a key without giving it away.
GET /chaos/stats then counts each key's requests under "keys", named
"key-" and the first 12 hex digits of the key's SHA-256, never the key:
requests, admitted, rate_limited, out_of_quota, windows, and the most
requests and tokens any one window admitted.
`

// KeyFlags are the per-key limits' flags of "rebound chaos".
type KeyFlags struct {
	rpm, tpm  *int
	window    *time.Duration
	exhausted *string
}

// DefineKeyFlags defines the per-key limits' flags on fs.
func DefineKeyFlags(fs *flag.FlagSet) KeyFlags {
	return KeyFlags{
		rpm:       fs.Int("key-rpm", 0, "hold each API key to `N` requests per --key-window (0: no limit)"),
		tpm:       fs.Int("key-tpm", 0, "hold each API key to `N` input tokens per --key-window (0: no limit)"),
		window:    fs.Duration("key-window", chaos.DefaultKeyWindow, "the `window` of --key-rpm and --key-tpm"),
		exhausted: fs.String("key-quota-exhausted", "", "comma-separated `prefixes` of API keys out of quota from the start"),
	}
}

// Set sets the per-key limits of cfg from f, or says in one line which
// flag is wrong.
func (f KeyFlags) Set(cfg *chaos.Config) error {
	switch {
	case *f.rpm < 0:
		return fmt.Errorf("--key-rpm %d is negative", *f.rpm)
	case *f.tpm < 0:
		return fmt.Errorf("--key-tpm %d is negative", *f.tpm)
	case *f.window <= 0:
		return fmt.Errorf("--key-window %v is not a positive duration", *f.window)
	}
	cfg.KeyRPM, cfg.KeyTPM, cfg.KeyWindow = *f.rpm, *f.tpm, *f.window
	if *f.exhausted == "" {
		return nil
	}
	for _, p := range strings.Split(*f.exhausted, ",") {
		if p = strings.TrimSpace(p); p == "" {
			return fmt.Errorf("--key-quota-exhausted has an empty prefix, which would match every key")
		}
		cfg.KeysOutOfQuota = append(cfg.KeysOutOfQuota, p)
	}
	return nil
}
