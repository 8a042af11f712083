// Package reboundmcp keeps an MCP client's session with one server alive
// through the server's crashes, hangs and lost sessions, and sends a
// request cut short again only when that cannot repeat a side effect.
//
// A Transport is an mcp.Transport: give it to the official SDK's
// mcp.Client.Connect in place of the server's own transport, or relay
// another client's connection through it with Serve (as `rebound mcp`
// does for agents in any language).
//
//	t := reboundmcp.New(reboundmcp.Command(exec.Command("my-mcp-server")), reboundmcp.Options{})
//	session, err := mcp.NewClient(impl, nil).Connect(ctx, t, nil)
//
// NewLineConn is the SDK's stdio framing read without a goroutine of its
// own: given to Serve as the client's connection, a call to a stdio
// server passes from one goroutine to another nowhere on its way, and a
// line that is not JSON-RPC is answered with a parse error while serving
// goes on.
//
// # A session that comes back
//
// A stdio server runs in a process group of its own. When it exits, is
// killed, or writes what is not JSON-RPC, it is started again: at once
// the first time, then after a backoff from 100 ms doubling to 2 s (each
// wait drawn from the upper half of its span), which starts over once a
// server has run for 10 s. The new server is given the client's session
// as it was: the client's own initialize (same capabilities, same
// protocol version), notifications/initialized, its resource
// subscriptions and its log level. A client of the stateless protocol,
// which sends no initialize, needs nothing replayed. After 10 crashes
// within 30 s a respawn breaker (a breaker.Breaker, asked by the engine
// before each start as rebound.Do asks one) stops the restarts for 30 s,
// then tries
// one start; a start that then runs for 10 s closes it, one that dies
// sooner opens it again.
//
// Over streamable HTTP, what comes back is the session. The transport's
// word that the server does not know the session opens a new one,
// re-initialized the same way: the spec's 404, or a 400 whose body says
// the session ID is missing or invalid (as the official TypeScript SDK's
// servers answer), to a request that carried the session's ID, whatever
// the body says besides. A JSON-RPC error answering a request never is,
// whatever its code or message: -32001 is the TypeScript SDK's "Session
// not found" but also its request timeout, which a tool whose own request
// to the client timed out answers with, after it may have acted. The
// endpoint's user, path and query string, where hosted servers take their
// keys, go with every request to it, but errors and logs name the server
// by scheme, host and port alone. Beneath the session, rebound's engine
// (rebound.Transport, under Options.Policy) retries 429 and 503 after
// their Retry-After, and refused connections; it counts every POST as
// side-effecting, so it sends one again only when it provably never
// reached the server.
//
// The server's own requests to the client (sampling, elicitation,
// roots, ping) reach the client under IDs of rebound's, never used twice
// in a session, and the client's answer goes back under the server's ID
// to the start that asked: a restarted server, numbering its requests
// afresh, never takes an answer meant for its dead predecessor. When a
// start ends, the client is sent notifications/cancelled for each request
// it left open, and a late answer to one is dropped.
//
// After every start, and whenever the server says
// notifications/tools/list_changed, rebound lists the server's tools
// itself, all pages, under request IDs the client never sees, and keeps
// each tool's annotations. When a restarted server's tools, prompts or
// resources differ from the ones listed before, the client is sent the
// matching list_changed notification.
//
// # What is sent again
//
// A request is sent again after a crash or a lost session when doing it
// twice does what doing it once does:
//
//	request                                         server died, or lost the session, while it ran
//	initialize, ping, tools/list, prompts/list,     sent again
//	prompts/get, resources/list, resources/read,
//	resources/templates/list, completion/complete,
//	logging/setLevel, resources/(un)subscribe
//	tools/call, annotations readOnlyHint: true      sent again
//	tools/call, annotations idempotentHint: true    sent again
//	tools/call, any other annotations, or none,     not sent again: the caller gets an error that
//	  or a tool never seen listed                   names the tool and says it may have taken effect
//	any request the server refused for its session  sent again, whatever it is: it never ran
//
// Options.Tools overrides a tool's annotations with a tool.Kind, the word
// package tool uses for its own guard: tool.ReadOnly and tool.Idempotent
// are sent again, tool.SideEffects is not, and the zero tool.Unknown
// leaves the tool to its annotations, which only make it safe by saying
// so. IgnoreAnnotations treats every tool it does not name as
// side-effecting. A JSON-RPC error answer
// (parse error, invalid request, method not found, invalid params, or any
// other) is the server's answer and goes back as it came, as does a tool
// result with isError: true. Resending is bounded by Options.Policy:
// its attempts, its backoff, its budget and breaker.
//
// # What the caller sees
//
// Nothing, when a request is resent and answered: the answer comes under
// the client's own request ID. Otherwise a JSON-RPC error response
// (code -32603) whose message says what happened:
//
//   - the server died or lost the session while a tool that is not safe
//     to repeat ran: the message names the tool and says the call may
//     have taken effect and was not sent again;
//   - the server stayed down for Options.DownWait (10 s) after it went
//     down, or its respawn breaker is open: ErrServerDown's message, at
//     once for every later call until it is back;
//   - the request had no answer and no progress notification for
//     Options.IdleTimeout (60 s): the server is sent
//     notifications/cancelled for it; progress notifications for the
//     request's progressToken keep a long call alive;
//   - the resends the Policy allows ran out.
//
// A request the client cancels (notifications/cancelled) is cancelled at
// the server under the ID the server knows, and gets no answer. A client
// that reuses the ID of a request still in flight is refused (invalid
// request), so that no answer can be taken for another.
//
// # Seen
//
// Options.Logger gets one JSON line per client request, in the schema of
// rebound proxy's access line (message request, kind mcp: server, method,
// tool, attempts, outcome, whether the server restarted during it,
// latency_ms), never its arguments or result; restarts
// (mcp.restart) and the respawn breaker's changes (mcp.breaker) have lines
// of their own. Options.Observer (else Policy.Observer) gets the same as
// rebound's Events, so that observe.Slog logs them and reboundotel traces
// and counts them:
//
//   - every attempt of a request: EventAttempt, EventRetry, EventGiveUp,
//     under the Target "mcp:NAME/TOOL" for a tools/call and
//     "mcp:NAME/METHOD" otherwise;
//   - EventRestart, under "mcp:NAME": the server went down (Err says why)
//     and start number Attempt follows after Wait;
//   - EventBreaker, under "mcp:NAME": the respawn breaker entered State,
//     "open" for Wait (Err: the last crash's cause), "half-open" when one
//     start probes, "closed" once that start has run for HealthyAfter.
//
// A restart and a breaker's change belong to no request: they go to the
// Observer itself, never to a per-call one, and a request cut short by
// the crash sees it as its attempt's error.
//
// # Ending
//
// Closing the connection (the SDK's ClientSession.Close, or the client's
// end of Serve) ends every request in flight and the server: a stdio
// server's whole process group gets SIGTERM, then SIGKILL, so that no
// grandchild outlives it; an HTTP session ends with the spec's DELETE, so
// that a server that holds one session at a time takes the next
// initialize. On Linux a stdio server also gets SIGKILL from the kernel
// when the program ends, however it ends (a parent-death signal), so that
// one that does not exit when its stdin closes is not left running after
// a SIGKILL or the OOM killer; elsewhere it sees its stdin close.
package reboundmcp
