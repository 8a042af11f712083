package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
)

const chaosUsage = `usage: rebound chaos [flags]

Serve a fault-injecting HTTP server until interrupted. Every request is
answered according to a mode (ok, random, down, badreq, retryafter, slow,
reset, overload, quota, context, stream-cut, lost-reply, text); a request can
pick its own with the X-Chaos-Mode header or the chaos_mode query parameter.
In stream-cut mode a streaming request's stream breaks off, with probability
--fail-rate, after --cut-after pieces of text (or as many as an
X-Chaos-Cut-After: N header asks for). In lost-reply mode every request
performs an action, counted once per Idempotency-Key, and its reply is lost
with probability --fail-rate, by a dropped connection or an answer delayed
by --slow. In text mode a request gets an answer that depends only on --seed
and its first user message, streamed in pieces if it asks for a stream;
X-Chaos-Cut-At: BYTES with X-Chaos-Cut-How: abort|close|error cuts the
stream, X-Chaos-First-Token-Delay: DURATION and X-Chaos-Stall: BYTES:DURATION
slow it, and a request whose last assistant message is a prefix of the
answer gets the rest of it. Answers follow a profile: plain, or the wire
format of openai, anthropic or gemini, which their SDKs parse; a request can
pick its own with the X-Chaos-Profile header. A failure carries a wait hint
in retryafter mode, on every failure if --retry-after is given, and when the
request asks with an X-Chaos-Retry-After: SECONDS header. A success
reports the token usage of its profile: a token per 4 bytes, rounded up, of
the prompt's text and of the answer's, which is cut short to fit the
request's max_tokens (or max_completion_tokens, max_output_tokens,
maxOutputTokens; the largest it names), for each of the n (candidateCount)
answers it asks for, with a Gemini thinking budget billed in full and, for
context the provider keeps (previous_response_id, conversation, a stored
prompt, cachedContent), the tokens an X-Chaos-Context-Tokens header says.
GET /chaos/stats reports counts by status, of broken
streams, of actions and of continuations, the tokens billed (a success's
usage, a cut stream's output delivered before the cut, nothing for a
failure), and requests and tokens by X-Chaos-Tally header and model; POST
/chaos/reset zeroes them, forgets idempotency keys and restarts the seeded
outcome sequence.

The first line on stdout is "listening on http://HOST:PORT".

flags:
`

// runChaos implements "rebound chaos". It serves a chaos.Server until ctx is
// done and returns the exit code: 0 after a clean stop or -h, 1 if it cannot
// listen or serve, 2 for bad usage.
func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8787", "listen on `host:port` (port 0 picks a free port)")
	mode := fs.String("mode", chaos.ModeRandom, "default `mode` of requests that name none")
	seed := fs.Uint64("seed", 1, "seed of the outcome sequence of random, stream-cut and lost-reply mode, and of text mode's answers")
	failRate := fs.Float64("fail-rate", 0.35, "failure probability in random, stream-cut and lost-reply mode, in (0, 1]")
	retryAfter := fs.Int("retry-after", 1, "wait hint `seconds` sent in retryafter mode, at most a year (31536000); if given, with every failure")
	slow := fs.Duration("slow", time.Second, "response `delay` in slow mode and of late replies in lost-reply mode")
	profile := fs.String("profile", chaos.ProfilePlain, "answer in the wire format of `profile` (plain, openai, anthropic, gemini, azure, bedrock, local)")
	cutAfter := fs.Int("cut-after", 0, "`pieces` of text a breaking stream sends before it breaks, in stream-cut mode")

	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "rebound chaos: "+format+"\n", a...)
		return 2
	}
	if code, done := parseFlags(fs, args, chaosUsage, withStdout(stderr, stdout)); done {
		return code
	}
	// An explicit --retry-after asks for a wait hint with every failure.
	hintAll := false
	fs.Visit(func(f *flag.Flag) { hintAll = hintAll || f.Name == "retry-after" })
	// chaos.Config reads zero as "use the default"; on the command line a
	// zero would be a surprise either way, so it is refused.
	switch {
	case math.IsNaN(*failRate) || *failRate <= 0 || *failRate > 1:
		return usageErr("--fail-rate %v outside (0, 1] (use --mode ok for no failures)", *failRate)
	case *retryAfter < 1:
		return usageErr("--retry-after %d is not a positive number of seconds", *retryAfter)
	// Checked in seconds: multiplied into a Duration first, it would wrap.
	case *retryAfter > int(chaos.MaxRetryAfter/time.Second):
		return usageErr("--retry-after %d is beyond a year (want 1 to %d seconds)", *retryAfter, chaos.MaxRetryAfter/time.Second)
	case *slow <= 0:
		return usageErr("--slow %v is not a positive duration", *slow)
	case *cutAfter < 0:
		return usageErr("--cut-after %d is negative", *cutAfter)
	}
	srv, err := chaos.New(chaos.Config{
		Mode:             *mode,
		FailRate:         *failRate,
		Seed:             *seed,
		RetryAfter:       time.Duration(*retryAfter) * time.Second,
		SlowDelay:        *slow,
		Profile:          *profile,
		HintEveryFailure: hintAll,
		CutAfter:         *cutAfter,
	})
	if err != nil {
		return usageErr("%s", strings.TrimPrefix(err.Error(), "chaos: "))
	}

	// An address that is not host:port is bad usage; one that cannot be
	// had (a port in use) is a failure.
	if _, err := serve.CheckAddr(*addr); err != nil {
		return usageErr("%v", err)
	}
	err = serve.Run(ctx, serve.Config{
		Addr: *addr,
		Server: &http.Server{
			Handler:           srv,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          log.New(stderr, "rebound chaos: ", 0),
		},
		Listener: chaos.NewListener,
		Drain:    5 * time.Second, // requests in flight (slow mode, say) finish, but not forever
		Stdout:   stdout,
		Unfinished: func(err error) {
			fmt.Fprintf(stderr, "rebound chaos: shutdown: %v; closing open connections\n", err)
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "rebound chaos: %v\n", err)
		return 1
	}
	return 0
}
