// The official TypeScript MCP SDK 2.x as a client of `pybox mcp`, for the
// end-to-end tests (e2e/mcp_e2e_test.go). Where ../tsclient's SDK 1.x
// initializes (MCP 2025-11-25), this one speaks MCP 2026-07-28: no
// handshake, a server/discover probe, _meta on every request.
//
//   node client.mjs STEPS -- COMMAND ARGS...
//
// STEPS is a JSON array of {"op": "list"} and {"op": "call", "args": {...}}.
// The client starts COMMAND over stdio, runs the steps in order and prints
// one JSON object: the negotiated protocol version, the server's name and
// one result per step (what the SDK returned, or {"thrown": message}).
import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const [steps, sep, command, ...args] = process.argv.slice(2);
if (sep !== '--' || !command) {
  process.stderr.write('usage: node client.mjs STEPS -- COMMAND ARGS...\n');
  process.exit(2);
}
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: 'inherit' });
// The SDK's default is the 2025 handshake; 'auto' probes with
// server/discover first, as a host meeting a server of unknown age does,
// and falls back to initialize only when the probe gets no modern answer
// (the test then sees 2025-11-25 and fails).
const client = new Client({ name: 'pybox-e2e-typescript-2', version: '0' }, { versionNegotiation: { mode: 'auto' } });
await client.connect(transport);
const out = { protocolVersion: client.getNegotiatedProtocolVersion(), server: client.getServerVersion(), results: [] };
for (const step of JSON.parse(steps)) {
  try {
    if (step.op === 'list') {
      out.results.push(await client.listTools());
    } else if (step.op === 'call') {
      // Runs under QEMU's TCG can take a while: more than the SDK's 60 s default.
      out.results.push(await client.callTool({ name: 'run_python', arguments: step.args }, { timeout: 180000 }));
    } else {
      out.results.push({ thrown: 'unknown op ' + step.op });
    }
  } catch (e) {
    out.results.push({ thrown: String(e) });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
