// Package mcptest is `pybox check`: PyBox's own MCP client, which starts an
// MCP server over stdio (`pybox mcp`, or any command) and runs named
// checks against it, each ending in a [Result]: PASS, or FAIL with what
// was expected, what came back and a hint.
//
// The checks speak through the Go SDK's client, as an agent's client
// would, but the server's stdin and stdout pass through a tap that sees
// every line on the wire. That is how a check sees what an SDK hides:
// a line that is not a protocol message, a response to an id nobody sent
// (a forged id 999), a response to a cancelled call, the raw size of a
// result. Lines an SDK would choke on are recorded and held back from it,
// so that one defect fails one check and not every check after it.
//
// The checks share one server session and as few runs as they can, since
// each run costs about a second under TCG. That session speaks MCP
// 2026-07-28, the newest revision, as an up-to-date agent's client does
// (server/discover, no handshake). The initialize check opens a second
// session at 2025-11-25, for clients that still handshake, and closes it
// when done; the few checks that must end a session (a 600 KiB message,
// no VM) start their own server too.
package mcptest
