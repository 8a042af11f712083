package mcprun

// Usage is the help of "rebound mcp": what it does, and its flags (which
// the command appends).
const Usage = `usage: rebound mcp [flags] -- COMMAND [ARGS...]
       rebound mcp [flags] --upstream URL

Put rebound in front of one MCP server, so that its crashes, hangs and lost
sessions do not reach the agent. With -- COMMAND it runs a stdio server
(npx -y @modelcontextprotocol/server-memory, say) in a process group of its
own; with --upstream it speaks streamable HTTP to the server at URL. The
agent talks to rebound as it would to the server: over standard input and
output by default (stdout carries the protocol and nothing else; logs and
the server's own stderr go to stderr), or over streamable HTTP at
http://HOST:PORT/mcp with --addr, one upstream connection (for a command,
one process) per client session.

  - A server that exits or is killed is started again (at once, then with
    jittered backoff from --restart-min doubling to --restart-max, reset
    after --healthy-after of running), the client's initialize replayed,
    then its subscriptions and log level; the client is told when the
    server's tools, prompts or resources changed. An HTTP session the
    server lost (a 404, or a 400 naming the session, to a request in it)
    is opened again; 429, 503 and refused connections are retried, with
    their Retry-After. Errors and logs name the server by scheme, host
    and port, never by the URL's user, path or query.
  - A tools/call cut short by a crash or a lost session is sent again only
    if the tool's last listing says readOnlyHint or idempotentHint (or the
    --config file says read-only or idempotent); a tool never listed is
    side-effecting. Otherwise the agent gets a JSON-RPC error naming the
    tool and saying it may have taken effect. A request the server refused
    because it did not know the session never ran and is resent. Listing,
    reading and ping are always resent; an isError result and a JSON-RPC
    error of any code (-32001 too) are the server's answers.
  - Nothing hangs: while the server is down a call waits up to --down-wait,
    then fails; --crash-limit crashes within --crash-window stop the
    restarts for --crash-cooldown, then one start is tried; a call with no
    result and no progress for --idle-timeout is cancelled.

The --config file names tools whose annotations are wrong or missing:
{"tools": {"create_entities": "side-effects", "search_nodes": "read-only"}},
each "read-only", "idempotent" or "side-effects".

With --addr, a loopback address asks no token, and then only requests for
a loopback host name (localhost, 127.0.0.0/8, [::1], any port; others with
--allow-host) are answered, so that a web page that rebinds its own name to
127.0.0.1 cannot call the server; any other address needs tokens
(--token-env or --tokens-file), sent as "Authorization: Bearer TOKEN".
Tokens or not, a request from a web page (an Origin header, or a
Sec-Fetch-Site other than same-origin) is refused unless its origin is
given with --allow-origin. Refused: a 403 (401 for a missing or wrong
token) with a JSON-RPC error body. The first line on stdout is
"listening on http://HOST:PORT/mcp". A session answers only the token
that opened it, ends with the client's DELETE, after --session-timeout
without a request, or at shutdown; its upstream ends with it. Beside
/mcp, as on the proxy's front: GET /healthz and /readyz (503 while
draining) need no token, and /metrics (Prometheus) answers requests from
this machine, or with the admin token (--admin-token-env). SIGHUP reads
the --config file again for the sessions opened after it; without
--config it is ignored.

Logs go to stderr as JSON lines (slog): one per client request (server,
method, tool, attempts, outcome, whether the server restarted, duration;
never arguments or results), and the restarts. On SIGTERM, SIGINT, SIGHUP
over stdio, or when the client closes stdin (once the requests it made are
answered), rebound ends the server's whole process group (an HTTP
server's session with DELETE) and exits 0. Bad
flags: one line on stderr, exit 2.

flags:
`
