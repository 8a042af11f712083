// Package chaosrun runs "rebound chaos": the chaos server, served until
// the command is told to stop.
package chaosrun

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"time"

	"github.com/rebound-go/rebound/chaos"
	"github.com/rebound-go/rebound/cmd/rebound/internal/serve"
)

// Usage is the help of "rebound chaos": what the chaos server answers
// (MCPUsage follows it, then the flags).
const Usage = `usage: rebound chaos [flags]

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
`

// Serve serves srv on addr (checked: see serve.CheckAddr) until ctx is
// done, then lets the requests in flight (slow mode, say) finish for a
// few seconds, and returns the command's exit code: 0 after a clean stop,
// 1 if it could not listen or serve.
func Serve(ctx context.Context, srv *chaos.Server, addr string, stdout, stderr io.Writer) int {
	err := serve.Run(ctx, serve.Config{
		Addr: addr,
		Server: &http.Server{
			Handler:           srv,
			ReadHeaderTimeout: 10 * time.Second,
			ErrorLog:          log.New(stderr, "rebound chaos: ", 0),
		},
		Listener: chaos.NewListener,
		Drain:    5 * time.Second,
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
