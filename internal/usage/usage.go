// Package usage is the one account of where each provider's API reports
// the tokens an answer used, and what each count means: which counts are
// input read afresh, which were read from the provider's prompt cache or
// written into it, and which are output. Spend caps settle by it, the
// proxy's access log and metrics count by it, batch journals record it,
// and the chaos server reports it: each reads or writes the Dialects
// table, never a field name of its own.
//
// The dialects part on what their input count holds. OpenAI's
// prompt_tokens and input_tokens, and Gemini's promptTokenCount, count
// every input token, those read from the cache included (reported apart
// as cached_tokens, cachedContentTokenCount). Anthropic's input_tokens,
// and Bedrock's inputTokens, count only what was neither read from the
// cache nor written to it (cache_read_input_tokens and
// cache_creation_input_tokens, cacheReadInputTokens and
// cacheWriteInputTokens, apart). Counts holds them one way: Input is the
// input read afresh, billed at the input price; CacheRead, CacheWrite and
// CacheWrite1h are billed at their own.
package usage

import "strings"

// Counts are an answer's tokens, by how a provider bills them.
type Counts struct {
	// Input is the input read afresh: neither read from the cache nor
	// written into it.
	Input int64
	// CacheRead is the input read from the provider's prompt cache.
	CacheRead int64
	// CacheWrite is the input written into the cache to live five
	// minutes (Anthropic's default, and every cache write a provider
	// does not split by time), CacheWrite1h into it to live an hour.
	CacheWrite, CacheWrite1h int64
	// Output is the output, thoughts included.
	Output int64
}

// InputAll is every input token, however billed.
func (c Counts) InputAll() int64 { return c.Input + c.CacheRead + c.CacheWrite + c.CacheWrite1h }

// A Dialect is where one API reports its usage, and what its counts
// hold. A path names a member of an object, and a dot the member of that
// member ("prompt_tokens_details.cached_tokens").
type Dialect struct {
	// Name is the dialect's, as rebound's dialects are named.
	Name string
	// Holders are the paths of the objects the counts are members of, in
	// the answer or in one of its stream's events.
	Holders []string
	// Input is the count of input tokens; InputHoldsCache says it counts
	// those read from the cache too.
	Input           string
	InputHoldsCache bool
	// Output are the counts of output, summed (Gemini's thoughts are
	// apart from its candidates).
	Output []string
	// CacheRead is the count of input read from the cache; CacheWrite of
	// that written into it, and CacheWrite5m and CacheWrite1h its split by
	// time to live, where the API gives one. "" where the API reports
	// none.
	CacheRead, CacheWrite, CacheWrite5m, CacheWrite1h string
	// Mark is the member that tells a holder is this dialect's: the
	// first dialect whose Mark a holder has reads it.
	Mark string

	at indexes // of its paths, for Read
}

// The dialects, in the order a holder is matched to them.
var (
	OpenAIChat = Dialect{
		Name: "openai-chat", Holders: []string{"usage"},
		Input: "prompt_tokens", InputHoldsCache: true, Output: []string{"completion_tokens"},
		CacheRead: "prompt_tokens_details.cached_tokens", Mark: "prompt_tokens",
	}
	OpenAIResponses = Dialect{
		Name: "openai-responses", Holders: []string{"usage", "response.usage"},
		Input: "input_tokens", InputHoldsCache: true, Output: []string{"output_tokens"},
		CacheRead: "input_tokens_details.cached_tokens", Mark: "input_tokens_details",
	}
	Anthropic = Dialect{
		Name: "anthropic", Holders: []string{"usage", "message.usage"},
		Input: "input_tokens", Output: []string{"output_tokens"},
		CacheRead: "cache_read_input_tokens", CacheWrite: "cache_creation_input_tokens",
		CacheWrite5m: "cache_creation.ephemeral_5m_input_tokens", CacheWrite1h: "cache_creation.ephemeral_1h_input_tokens",
		Mark: "input_tokens",
	}
	Bedrock = Dialect{
		Name: "bedrock", Holders: []string{"usage"},
		Input: "inputTokens", Output: []string{"outputTokens"},
		CacheRead: "cacheReadInputTokens", CacheWrite: "cacheWriteInputTokens", Mark: "inputTokens",
	}
	Gemini = Dialect{
		Name: "gemini", Holders: []string{"usageMetadata"},
		Input: "promptTokenCount", InputHoldsCache: true, Output: []string{"candidatesTokenCount", "thoughtsTokenCount"},
		CacheRead: "cachedContentTokenCount", Mark: "promptTokenCount",
	}
	Dialects = []*Dialect{&OpenAIChat, &OpenAIResponses, &Anthropic, &Bedrock, &Gemini}
)

// Of returns the dialect of name, nil if none.
func Of(name string) *Dialect {
	for _, d := range Dialects {
		if d.Name == name {
			return d
		}
	}
	return nil
}

// Object returns c as d reports it: the members of a holder, nested as
// its paths say, ready to be written as JSON. A count d has no member
// for is folded into one it has (a cache write into the input where d
// reports none), so that the object's counts bill as c's do at prices
// that do not tell the two apart.
func (d *Dialect) Object(c Counts) map[string]any {
	o := map[string]any{}
	input := c.Input
	set := func(path string, n int64) {
		if path == "" {
			return
		}
		parent, leaf, nested := strings.Cut(path, ".")
		if !nested {
			o[path] = n
			return
		}
		inner, _ := o[parent].(map[string]any)
		if inner == nil {
			inner = map[string]any{}
			o[parent] = inner
		}
		inner[leaf] = n
	}
	read, write := c.CacheRead, c.CacheWrite+c.CacheWrite1h
	if d.CacheRead == "" {
		input, read = input+read, 0
	}
	if d.CacheWrite == "" {
		input, write = input+write, 0
	}
	if d.InputHoldsCache {
		input += read
	}
	set(d.Input, input)
	set(d.CacheRead, read)
	set(d.CacheWrite, write)
	if d.CacheWrite1h != "" {
		set(d.CacheWrite5m, c.CacheWrite)
		set(d.CacheWrite1h, c.CacheWrite1h)
	}
	set(d.Output[0], c.Output)
	return o
}
