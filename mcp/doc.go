// Package reboundmcp keeps an MCP client's session with one server alive
// through the server's crashes, hangs and lost sessions, and resends a
// request cut short only when doing so cannot repeat a side effect.
package reboundmcp
