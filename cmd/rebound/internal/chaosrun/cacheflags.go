package chaosrun

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/rebound-go/rebound/chaos"
)

// CacheUsage is the help of the prompt cache of "rebound chaos".
const CacheUsage = `
Prompt cache: with --prompt-cache, the server caches prompts as providers
do, to test what retries, fallbacks and key rotation do to an agent's
bill. For each API key and model it keeps the prefixes of the prompts it
has seen, whole messages at a time (the system prompt and tools, then the
conversation up to each message), if at least 1024 tokens long, until
--cache-ttl after their last use (5 minutes unless given). A request reads
the longest of its prefixes the cache holds, and writes the rest of its
prompt; its usage reports both in its dialect's own fields (OpenAI's
cached_tokens; Anthropic's cache_read_input_tokens and
cache_creation_input_tokens; Gemini's cachedContentTokenCount; Bedrock's
cacheReadInputTokens and cacheWriteInputTokens), OpenAI and Gemini billing
a write as input, as they report none. Another key never reads it.
GET /chaos/stats counts cache_read_tokens and cache_write_tokens apart from
input_tokens, in all and by tally, so that a test can price the bill.
`

// CacheFlags are the prompt cache's flags of "rebound chaos".
type CacheFlags struct {
	on  *bool
	ttl *time.Duration
}

// DefineCacheFlags defines the prompt cache's flags on fs.
func DefineCacheFlags(fs *flag.FlagSet) CacheFlags {
	return CacheFlags{
		on:  fs.Bool("prompt-cache", false, "cache prompts per API key and model, as providers do, and report the tokens read from the cache and written into it"),
		ttl: fs.Duration("cache-ttl", chaos.DefaultCacheTTL, "how long a cached prefix lives after its last use, with --prompt-cache"),
	}
}

// Set sets the prompt cache of cfg from f, given the flags given on the
// command line, or says in one line which flag is wrong.
func (f CacheFlags) Set(cfg *chaos.Config, given map[string]bool) error {
	switch {
	case *f.ttl <= 0:
		return fmt.Errorf("--cache-ttl %v is not a positive duration", *f.ttl)
	case given["cache-ttl"] && !*f.on:
		return errors.New("--cache-ttl applies to --prompt-cache only")
	}
	if *f.on {
		cfg.PromptCache, cfg.CacheTTL = true, *f.ttl
	}
	return nil
}
