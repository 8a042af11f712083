// Package frontdoor decides who may call a server of rebound's that
// listens on HTTP: the proxy (rebound proxy) and the MCP front
// (rebound mcp --addr). Both hold something worth stealing — an
// upstream's key, a tool server that writes files — and both are often
// run on a developer's machine with no token, so the rule is written
// once, here, and each server answers a refusal in its own dialect.
//
// A Door without tokens is a local developer server and does what they
// do: it answers only requests for a loopback host name (localhost,
// 127.0.0.0/8, [::1], any port) or one allowed, so that a web page that
// rebinds its own name to 127.0.0.1 is refused. Tokens or not, a request
// from a web page (its Origin, or Sec-Fetch-Site when it sends none) is
// answered only from an origin allowed, to which alone CORS headers go;
// a pre-flight OPTIONS is answered by the door, never passed on.
//
// With tokens the Host is not checked: the token stands guard, and a
// server behind another sees that server's names. The Origin still is:
// no SDK sends one, a browser app the operator runs is listed, and a page
// that learnt a token still cannot use it from elsewhere. Tokens are
// looked for where clients send their keys (Authorization: Bearer,
// x-api-key, x-goog-api-key, api-key, the "key" query parameter) and
// compared in constant time.
//
// The door decides and the caller shapes the answer: Enter returns a
// reason to refuse (or answers a pre-flight itself), Admit a yes or no
// (Match also says which token, by which the proxy tells its tenants
// apart without ever keeping a token beside a name), and the caller writes its 403 or 401 as its clients read errors (the
// proxy in the request's API dialect, the MCP front as a JSON-RPC
// error). Enter comes first, for every request (internal/front calls it
// for both servers, before the paths it answers itself); Admit before
// anything is served that needs a token (the health checks need none).
//
// Who may call is also how long a caller may hold the door: both servers
// take their http.Server from Server, with a header timeout and an idle
// timeout (a kept-alive connection is closed after two quiet minutes,
// whatever it was last answered, a 401 included), and read a request's
// body through a BodyReader, which gives up on a body silent for
// BodyStall or unfinished at its end (BodyTimeout for the MCP front, the
// proxy's own Options.BodyTimeout). A read timeout of the server's would
// do neither well: it would also end the answers that stream for minutes.
package frontdoor
