package bench

// Usage is the help of "rebound bench": its scenarios, and its flags
// (which the command appends).
const Usage = `usage: rebound bench [--scenario seed|cost|cache] [--json] [--seed N] [cost flags]

--scenario seed (the default) reproduces the 429 article's retry experiments
with rebound against the chaos server over loopback HTTP, the calls of each
row one after another, and prints the article's figure beside ours.

--scenario cost runs the $340 article's three retry strategies and rebound's
recommended setup over a simulated month of agent traffic, in virtual time,
through rebound's real retry, breaker and fallback code, and prints what each
costs per successful task. Its flags (days to incidents-per-day below) belong
to it alone; a rate of 0 means none.

--scenario cache sends 32 agents' conversations of 8 turns, over a long
system prompt, through a pool of three keys of the chaos server with its
prompt cache on (each key's cache apart, 5% of requests failing), once with
the keys taken in turn and failures retried on the next key, once through
rebound proxy's pool, which keeps a conversation on its key, and once
through one key; it prints the share of input read from the cache and what
each answered turn cost at Claude Sonnet's prices.

The same seed gives the same counts.

flags:
`
