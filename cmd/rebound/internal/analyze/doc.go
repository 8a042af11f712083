// Package analyze reads an agent's call logs and says where its retries
// went: which errors were retried, how often a retry helped, and how much
// was spent on retries that could never succeed.
//
// The author of the $340 article (see the README's Background) ran such a
// script over a month of logs and found $67 burnt retrying 400s; this
// package is that script, for any log in one of three JSON-lines schemas
// (rebound's own, a simple one, and rebound proxy's access log), mixed
// freely in one input.
//
// # Input
//
// One JSON object a line. Three schemas are recognised:
//
// rebound's own log (its slog JSON handler): a record whose "msg" is
// "rebound.call" is one finished call, with
//
//	"target"      string  what was called
//	"attempts"    int     attempts made (absent or 0: 1)
//	"succeeded"   bool    whether the call succeeded (required)
//	"kind"        string  on failure, the verdict kind (transient,
//	                      rate_limited, overloaded, quota_exhausted,
//	                      context_overflow, permanent, canceled)
//	"status"      int     on failure, the HTTP status, if there was one
//	"error_type"  string  on failure, the provider's error type, if any
//	"error_code"  string  on failure, the provider's error code, if any
//	"reason"      string  on failure, why rebound gave up; "refused by the
//	                      guard" (rebound.StopRefused: a spend cap refused
//	                      an attempt) marks a call refused by a cap, any
//	                      other value is read past
//	"waited_ms", "time", "level"   read past
//
// and, when the logger adds them (slog's Logger.With, say), the keys of
// the simple schema "input_tokens", "output_tokens" and "cost", and the
// keys of spend caps below.
//
// Other records, "rebound.retry" and "rebound.attempt" among them, and any
// record with another "msg" but "request", are skipped.
//
// rebound proxy's access log: a record whose "msg" is "request" is one
// request ("kind" "llm", or none before the kind was written; one of
// "kind" "mcp", rebound mcp's tool call, is skipped), with "status" (required; the call succeeded when it is from 1
// to 399), "attempts" (0, a request refused before its first attempt,
// counts as 1), "input_tokens", "output_tokens", "cache_read_tokens",
// "cache_write_tokens", "tenant", "tenant_cap_usd", "cost_usd" (the cost,
// as "cost"), "outcome" ("tenant_spend_cap" marks a request its
// tenant's spend cap refused), "cache" ("hit" or "stale": an answer its
// response cache served) and "saved_usd" (what that answer did not cost).
//
// The simple schema, for logs written by other tools: a record without
// "msg" is one call, with
//
//	"succeeded"     bool    whether the call in the end succeeded; required:
//	                        its presence is what identifies the schema
//	"status"        int     the HTTP status of the error the call met (the
//	                        last one, or the one it retried through); 0 or
//	                        absent for none or a transport error; a 2xx or
//	                        3xx status on a succeeded call counts as none
//	"error_type"    string  the provider's error type, e.g.
//	                        invalid_request_error
//	"error_code"    string  the provider's error code, e.g.
//	                        context_length_exceeded
//	"retried"       bool    whether the call was retried
//	"attempts"      int     attempts made; absent: 2 if retried, else 1
//	"input_tokens"  int     input tokens of one attempt, all of them
//	"cache_read_tokens", "cache_write_tokens"
//	                int     the parts of input_tokens read from the
//	                        provider's prompt cache and written into it
//	                        (optional; rebound proxy logs them)
//	"output_tokens" int     output tokens of the answer
//	"cost"          number  what the call cost in US dollars, all attempts
//	                        included (optional)
//	"reason"        string  as in rebound's records
//	"target", "model"       read past
//
// Both schemas may name the call's run and tenant and their caps:
//
//	"run"            string  the run (an agent's task, a conversation)
//	                         the call was made for
//	"tenant"         string  the tenant it was made for
//	"run_cap_usd"    number  the run's cap in US dollars (cost.Limit),
//	                         as in force for the call
//	"tenant_cap_usd" number  the tenant's shared cap in US dollars
//
// For example:
//
//	{"succeeded":false,"status":400,"error_type":"invalid_request_error","error_code":"context_length_exceeded","retried":true,"attempts":4,"input_tokens":131000,"model":"gpt-4o"}
//	{"succeeded":true,"input_tokens":1200,"output_tokens":300,"cost":0.006}
//	{"msg":"rebound.call","succeeded":false,"reason":"refused by the guard","run":"r-42","run_cap_usd":5,"tenant":"acme"}
//
// A line that is not a JSON object, has a known key of the wrong type
// ("reason" excepted: any value of it is read past but the refusal), a
// negative count or more than MaxAttempts attempts, cache counts that add
// up to more than input_tokens, a cost or a cap that is negative or above
// MaxCost, a rebound.call without "succeeded", or more than MaxLineBytes
// bytes is malformed: it is counted,
// the first few line numbers are kept, and reading goes on. A blank line,
// and an object in none of the schemas, is skipped.
//
// # Cost
//
// A call's cost is its "cost" if logged. Otherwise, given prices (US
// dollars per million tokens, Options.PriceIn and PriceOut), it is seed
// 002's accounting: every attempt pays for its input tokens, and only an
// answer's output tokens are paid for:
//
//	cost = input × attempts + (succeeded ? output_tokens × PriceOut : 0)
//	input = (input_tokens - cache_read_tokens - cache_write_tokens) × PriceIn
//	      + cache_read_tokens × PriceCacheRead + cache_write_tokens × PriceCacheWrite
//
// where a cache price not given is PriceIn.
//
// Otherwise, as for rebound's own records, which log no tokens, the cost is
// unknown, and dollar figures cover only the calls whose cost is known
// (priced_calls says how many). Prices are bounded by MaxPrice and costs by
// MaxCost, so that every figure is finite however large the counts.
//
// Waste: every attempt of a call that never succeeded, and every attempt
// but the last of one that did. A logged cost is split evenly across the
// call's attempts.
//
// # The provider's cache
//
// An agent resends its conversation on every turn, and providers bill
// the part of the input they have cached apart from the rest: a read from
// the cache at a tenth to a half of the input price, a write into it at
// up to twice it. The totals add up the input tokens the calls logged,
// those read from the cache and those written into it, and the share
// read from the cache; with prices, what the cache saved: what its tokens
// would have cost at PriceIn, every attempt's, less what they cost at
// the cache's prices (nothing, with the cache's prices not given; less
// than nothing when writes cost more than reads saved). The spend is
// the calls' cost as above: for rebound proxy's lines, their cost_usd,
// which the proxy settled at its own prices, the cache's included.
//
// # The response cache
//
// rebound proxy may answer a request from its response cache: at once,
// under "serve": "always" ("cache": "hit"), or in place of the providers'
// failure ("stale"). Such an answer bills nothing; the totals count the
// hits and the stale answers apart, and add up what they did not cost,
// their "saved_usd", the price of the answer at the proxy's prices.
//
// # Grouping
//
// Calls are grouped by the error they met: HTTP status, error type and
// code, and verdict kind. A succeeded call that met no error is in the row
// "ok"; a call that met one (a simple-schema record with a status, say) is
// in that error's row, where it counts as a success after retry. A row is
// named like "400 context_length_exceeded" (the status, then the code, else
// the type), "503", "overloaded_error" (no status), "transport error" (no
// status, type or code) or "canceled"; a call a spend cap refused is in the
// row "refused by a spend cap", with no kind. The kind is the one rebound logged,
// else rebound.ClassifyResponse's verdict on the status and a body
// {"error":{"type":T,"code":C}}. Each row carries a recommendation for its
// kind (see Recommendation). Retries spent in rows of kinds that are never
// worth retrying (permanent, quota_exhausted, context_overflow) are
// flagged as futile.
//
// Memory is constant in the length of the input: lines are not kept, only
// one counter set per group, and types and codes are cut to MaxCodeBytes.
// Past Options.MaxGroups distinct groups (default DefaultMaxGroups), new
// ones go to the row "other", so a hostile log cannot exhaust memory.
//
// # Spend against caps
//
// When calls name runs or tenants, each run and each tenant has its calls
// counted, the calls refused by a cap among them, and its spend: the cost
// of its calls whose cost is known, as above. Its cap is the largest its
// calls logged ("run_cap_usd" for the run, "tenant_cap_usd" for the
// tenant: a record naming both gives each its own), else the one given
// for all (Options.RunCapUSD, TenantCapUSD), else unknown. A run passed
// its cap if its spend is above it. A cap logged without a run (tenant)
// applies to nothing; an empty name is none.
//
// Names are cut to MaxCodeBytes, like error codes. At most Options.MaxKeys
// runs (default DefaultMaxKeys) are kept, and as many tenants: the calls
// of runs not yet seen once that many are are counted together
// (Report.OtherRuns), so that a log of a million runs holds ten thousand.
//
// # Report
//
// Report is what "rebound analyze --json" prints; "rebound help analyze"
// lists its keys and what each means.
package analyze
