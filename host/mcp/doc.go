// Package mcp is `pybox mcp`: a Model Context Protocol server over stdio
// that offers one tool, run_python, and runs every call in a fresh sealed
// box inside the PyBox VM.
//
// The server is the host's checkpoint between an AI agent and the VM. It
// shows the agent the ceilings the user configured (in the tool's input
// schema), checks every call against them again in code, keeps to the
// protocol's limits (one run at once, 32 calls and 256 messages a session,
// 512 KiB a message in, 64 KiB of receipt and 256 KiB a response out), and
// shapes the guest's receipt into the tool result, saying what it trimmed.
// Returned files that are well-formed pictures (checked by host/picture)
// also go to the client as image content, within the same limits.
//
// When the user opens the network (Options.Net, --allow-net), a call may
// name some of those hosts in its network argument, never more; its box
// reaches them through a proxy that this process serves, one
// egress.Gate per call, and the receipt's network section is that gate's
// record. A call that names none runs without network, as every call
// does on a server without the list.
//
// stdout is the protocol's alone: the program's output only ever travels
// as strings inside a tool result. The server never starts the VM and never
// runs code anywhere but in it.
//
// The pieces: [Options] (the user's ceilings), [Transport] (stdio framing
// and the per-session limits), [Server] (the tool), and [Dialer]/[Runner]
// (the way to the VM, host/client in the real binary).
package mcp
