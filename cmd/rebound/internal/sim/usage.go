package sim

// Usage is the help of "rebound sim": its scenarios, and its flags
// (which the command appends).
const Usage = `usage: rebound sim [--scenario occ|iid|overload|priority|hedge] [--json] [--html FILE] [--seed N] [--trials N]
                   [--cells C,C,...] [--clients N,N,...] [--strategies S,S,...] [--attempts N,N,...]

Run a simulation in virtual time through rebound's real retry code (each
simulated call a rebound.Run under a virtual clock), and print ours beside
the published or theoretical figures. The same seed gives the same numbers. --html FILE also
writes the results as a self-contained HTML page of charts.

--scenario occ (the default) re-runs Brooker's optimistic-concurrency
experiment ("Exponential Backoff and Jitter", AWS Architecture Blog, 2015):
N clients read a versioned row and write it back, a write succeeding only if
the version is still current, each client retrying after backoff until its
write succeeds; every network hop takes |Normal(10 ms, 2 ms)|. For each
strategy (exponential, decorrelated, equal, full, none) and each client
count it reports the mean writes and completion time over --trials trials
(default 100, seed 2015). --cells is another name for --clients in this
scenario.

--scenario iid fails every attempt independently with probability p. For
each policy (--attempts, default 1,2,3,4,6 attempts without delay) and each
p (--cells, default 0,0.05,...,0.5) it makes --trials calls (default 100000,
seed 1) and reports the share that succeeded and the attempts per call,
beside the theory: 1 - p^n and (1 - p^n)/(1 - p) for n attempts.

--scenario overload: one provider serves attempts first in, first out at
100 a second; calls arrive at 90 a second, each with a 5 s deadline and a
1 s timeout per attempt, and an attempt its client gave up on is still
served. After 30 s a trigger drops capacity to a fraction f for Δt seconds;
the run goes on for 10·Δt after it. For each strategy (none, retry3, budget,
rebound) and each cell (--cells, as f x seconds, default
0.1x5,0.1x10,0.1x30,0.5x5,0.5x10,0.5x30; seed 1) it reports goodput,
amplification (attempts per call), success rate and recovery time, and a
map of the cells.

--scenario priority: one provider serves 16 calls at a time, each for a
log-normal time (median 1 s, sigma 0.5: 14.1 calls a second), behind an
adaptive limit of 16. Interactive calls arrive at 60% of that capacity;
after 60 s a batch of 3000 requests starts, 64 at a time; the run lasts
20 minutes. For each strategy (noflood: interactive calls alone; fifo: the
batch on top, one queue; priority: the batch's calls marked Batch) it
reports the interactive calls' p50 and p99 latency from arrival to answer
(the wait for a slot included), and whether and how fast the batch
completed. --cells lists the MaxPassOver values the priority strategy runs
with (default 8, the limit's default; seed 1).

--scenario hedge makes the same calls without and with a hedge (rebound's
zero Hedge: a second attempt once the first has gone longer without a
token than the 90th percentile of the last 256 first-token times, none
until 16 are known; each hedge drawn from a zero RetryBudget). Every
attempt's time to first token is lognormal around 1 s with σ = 0.35, and
for 5% of attempts ten times that; calls of 2000 input and 500 output
tokens arrive at 20 a second (Poisson), stream 50 tokens a second after
their first, and cost Claude Sonnet 4's list price, $3 / $15 per million
input / output tokens. The loser of a race is cancelled at the winner's
first token and billed its input and the output it had produced. It
reports p50, p99 and mean time to first token, the share of calls hedged
and the spend beyond the unhedged calls', beside theory. --trials is the
number of calls (default 100000, seed 1); a p99 needs at least 100000
to rest on a thousand calls.

flags:
`
