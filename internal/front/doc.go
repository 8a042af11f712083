// Package front is the HTTP front of rebound's servers, the proxy
// (rebound proxy) and the MCP front (rebound mcp --addr): what every one
// of them does before its own work and around its life, written once so
// that both answer alike.
//
// Around each request, Enter keeps the order every server keeps: the
// door first (internal/frontdoor: a Host or Origin refused is a 403,
// written by the server in its own dialect; a pre-flight is answered
// there), then the front's own paths, which need no client token:
// /healthz (200 while the process serves), /readyz (200, or 503 once it
// drains, so that a load balancer sends nothing new) and /metrics, for a
// server that has metrics, to the admin only (a request from this
// machine, or one with the admin token). Anything else goes on to the
// server, which asks for a client token where it needs one.
//
// Around the server's life, Run listens, says where on the first line of
// standard output ("listening on http://HOST:PORT", and the path of an
// endpoint), serves with the limits of internal/frontdoor (a header
// timeout, an idle timeout), calls a reload at each SIGHUP (a server
// with nothing to reload says so in its log: SIGHUP's default action
// would end the process), and once told to stop (SIGTERM, SIGINT) drains:
// it stops accepting, lets the requests in flight finish for a bounded
// time, and closes what is still open.
package front
