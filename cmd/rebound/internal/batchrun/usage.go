package batchrun

// Usage is the help of "rebound batch": what it does with its input,
// its journal and its files, and its flags (which the command appends).
const Usage = `usage: rebound batch INPUT.jsonl --out OUTPUT.jsonl [flags]
       rebound batch status --journal PATH [--json]

Send every request of INPUT, a file in the OpenAI Batch API's format (lines
of {"custom_id", "method", "url", "body"}), to --base-url, through rebound's
recommended retries, rate limiting and retry budget, and write one line for
each custom_id answered to OUTPUT and one for each that failed to the errors
file, in the Batch API's output format.

Every outcome is written to a journal as it comes. Run the same command
again and it sends only what failed in a way a later run may cure (a 5xx, a
429, an overload, an exhausted quota) or was never answered; a permanent
failure (a 400, a prompt too long) is sent again only with --retry-failed.
A run that is killed, even with SIGKILL, loses at most the requests in flight
(up to --concurrency), which the next run sends again and reports. Each run
writes OUTPUT and the errors file afresh from the journal. An answer the
journal cannot record (its database away for longer than the lease, its
file damaged) is kept in OUTPUT with .unrecorded.jsonl for .jsonl, and the
next run records it before it sends anything. A damaged journal file is
refused: move it aside to start the batch afresh.

The journal is a file (--journal PATH, by default OUTPUT.journal) that one
run uses at a time, or PostgreSQL (--journal postgres://...), which several
workers on several machines share: each runs the same command, and each
request is sent by one of them at a time, under a lease that a dead worker
loses.

The key is read from the environment: OPENAI_API_KEY, ANTHROPIC_API_KEY or
GEMINI_API_KEY by --dialect, or the variable --api-key-env names, which must
be set. With the dialect's variable unset, a batch for a provider's own API
is refused; one for a --base-url of your own is sent without a key. A
request that could not reach its host (a name that did not resolve, a
connection refused) is sent again by the next run. Malformed input lines are reported with their line
numbers and skipped (--strict: nothing is sent); a custom_id used twice, or a
journal made from another input, stops the run before anything is sent.

"rebound batch status" prints the journal's counts.

Exit 0 when every request has succeeded, 1 when some failed, were not sent
(malformed lines) or the run was stopped (run again to go on), 2 on bad
usage.

flags:
`

// StatusUsage is the help of "rebound batch status".
const StatusUsage = `usage: rebound batch status --journal PATH|URL [--batch-name NAME] [--json]

Print how many requests of the batch a journal records as succeeded,
failed, failed permanently, in flight and not yet sent.

flags:
`
