package analyze

// Usage is the help of "rebound analyze": what it reads, what it
// reports, and its flags (which the command appends).
const Usage = `usage: rebound analyze [--json] [--price-in USD --price-out USD]
                       [--price-cache-read USD] [--price-cache-write USD]
                       [--run-cap USD] [--tenant-cap USD] FILE...
       rebound analyze --generate N [--seed S]

Read an agent's call logs and report where its retries went: calls grouped
by the error they met (status, error type and code, verdict kind), how many
were retried, how many a retry saved, the attempts and dollars wasted, and
what to do about each kind. Rows are sorted by wasted dollars, then calls.
Retries spent on errors that can never succeed (permanent, quota exhausted,
context overflow) are counted apart. FILE - is stdin. Flags may come before
or after the files.

Each line is a JSON object, in any of these schemas, mixed freely:

  rebound's own log: records with "msg":"rebound.call", one per call
  ("target", "attempts", "succeeded", and on failure "kind", "status",
  "error_type", "error_code", "reason"), and any key of the simple schema
  or of caps the logger adds; other records are skipped.

  rebound proxy's access log: records with "msg":"request", one per
  request ("status", required: answered under 400; "attempts",
  "input_tokens", "output_tokens", "cache_read_tokens",
  "cache_write_tokens", "tenant", "tenant_cap_usd", and "cost_usd", its
  cost); "outcome":"tenant_spend_cap" marks a request its tenant's spend
  cap refused; "cache":"hit" or "stale" an answer served from the
  response cache, and "saved_usd" what it did not cost.

  the simple schema, for other tools' logs: one object per call, without
  "msg":
    "succeeded"      bool, required: it identifies the schema
    "status"         int: the HTTP status of the error the call met
                     (0 or absent: none, or a transport error)
    "error_type", "error_code"   strings, as the provider sent them
    "retried"        bool
    "attempts"       int; absent: 2 if retried, else 1
    "input_tokens"   int, of one attempt, all of it
    "cache_read_tokens", "cache_write_tokens"   ints, optional: the
                     parts of input_tokens read from the provider's
                     prompt cache and written into it
    "output_tokens"  int, of the answer
    "cost"           number, US dollars for the whole call (optional)
    "reason"         string, as rebound logs it (optional)
    "target" or "model"          optional

  and, in any of them, optional spend caps:
    "run", "tenant"  strings: the run and the tenant the call was for
    "run_cap_usd"    number >= 0: the run's cap in US dollars
    "tenant_cap_usd" number >= 0: the tenant's cap in US dollars
  A call that gave up with "reason":"refused by the guard" was refused by
  a cap.

A call's cost is its "cost"; else, with --price-in and --price-out, its
input × attempts plus, if it succeeded, output tokens × price-out; else
unknown, and dollar figures cover only the calls priced. An attempt's
input costs input tokens × price-in, but those read from the cache cost
--price-cache-read and those written into it --price-cache-write (each
price-in when not given).

The input tokens the calls logged are added up, with those read from the
cache and written into it, and the share read from the cache; with
prices, so is what the cache saved: what its tokens would have cost at
price-in, every attempt's, less what they cost at the cache's prices
(nothing, unless the cache's prices are given).

When calls name runs or tenants, a table of runs and one of tenants
list, for each, its calls, those refused by a cap, its spend (the cost
of its calls whose cost is known), its cap (the largest its calls
logged, else --run-cap or --tenant-cap, else unknown), spend as a share
of the cap, and whether it passed the cap: those that passed or came
nearest their caps first, the first 20 of each. At most 10000 runs, and
as many tenants, are kept; the calls of further ones are counted
together as other runs (tenants).

Malformed lines (not a JSON object, a known key of the wrong type, a
negative cost or cap, longer than 1 MiB) are counted, reported on stderr
one line per file, and skipped. If not one line is a call (an empty or
binary file, say), the command says so on stderr in one line and exits 1.

Prices must lie between 0 and 1000000 dollars per million tokens; caps,
logged or given, between 0 and 1000000000 dollars.

--json prints one object with these keys:

  files      [{name, lines, calls, malformed, skipped, malformed_lines}]
             one per input; malformed_lines holds the first few
             malformed lines' numbers, from 1
  lines      lines read: calls + malformed + skipped
  calls, malformed, skipped
  totals     {calls, succeeded, success_rate, attempts, retries,
             calls_retried, retry_rate, succeeded_after_retry,
             wasted_attempts, priced_calls, cost_usd, wasted_usd,
             retry_cost_usd, cost_per_success_usd, futile_retries,
             futile_retry_cost_usd, input_tokens, cache_read_tokens,
             cache_write_tokens, cache_read_share, cache_saved_usd,
             response_cache_hits, response_cache_stale,
             response_cache_saved_usd}
  rows       [{group, status, error_type, error_code, kind, calls,
             attempts, retries, calls_retried, succeeded,
             succeeded_after_retry, success_rate, wasted_attempts,
             priced_calls, cost_usd, wasted_usd, retry_cost_usd,
             futile, recommendation}]
             by wasted_usd, then calls, most first
  runs       [{name, calls, refused, priced_calls, spend_usd, cap_usd,
             share_of_cap, passed_cap}]
             every run the calls named, those that passed or came
             nearest their caps first; left out when no call names one
  tenants    the same, of tenants
  other_runs, other_tenants   {calls, refused, priced_calls, spend_usd}
             the calls of runs (tenants) past the first 10000, counted
             together; left out when there are none

retries is attempts - calls; calls_retried counts the calls with more
than one attempt; retry_rate is calls_retried / calls; retry_cost_usd is
what the attempts after each call's first cost; cost_per_success_usd is
cost_usd over the priced calls that succeeded; futile_retries and
futile_retry_cost_usd are the retries spent, and what they cost, on
errors that can never succeed. input_tokens counts the input the calls
logged, of which cache_read_tokens were read from the provider's cache and
cache_write_tokens written into it; cache_read_share is
cache_read_tokens / input_tokens, null without input; cache_saved_usd is
what the cache saved at the given prices, negative when its writes cost
more than its reads saved, null without prices. response_cache_hits and
response_cache_stale count the answers served from rebound proxy's
response cache ("cache" "hit": no provider asked; "stale": in place of
the providers' failure), and response_cache_saved_usd is what they did
not cost (their "saved_usd"), null when none logs it. Dollar fields are null
when no call's cost is known; error_type, error_code and kind are left
out when empty.
refused counts the calls refused by a cap; spend_usd is the cost of the
priced_calls; cap_usd is null when no cap is known; share_of_cap is
spend_usd / cap_usd, null when either is unknown or the cap is 0;
passed_cap is spend_usd > cap_usd.

--generate N writes N synthetic log lines in both schemas to stdout, the
same for the same --seed, to try the command on or to measure it.

flags:
`
