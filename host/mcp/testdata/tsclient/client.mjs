// The official TypeScript MCP SDK as a client of `pybox mcp`, for the
// end-to-end tests (e2e/mcp_e2e_test.go).
//
//   node client.mjs STEPS -- COMMAND ARGS...
//
// STEPS is a JSON array of {"op": "list"} and {"op": "call", "args": {...}}.
// The client starts COMMAND over stdio, runs the steps in order and prints
// one JSON object: the negotiated protocol version, the server's name and
// one result per step (what the SDK returned, or {"thrown": message}).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

const [steps, sep, command, ...args] = process.argv.slice(2);
if (sep !== '--' || !command) {
  process.stderr.write('usage: node client.mjs STEPS -- COMMAND ARGS...\n');
  process.exit(2);
}
const transport = new StdioClientTransport({ command, args, env: process.env, stderr: 'inherit' });
let negotiated;
transport.setProtocolVersion = (v) => { negotiated = v; };
const client = new Client({ name: 'pybox-e2e-typescript', version: '0' });
await client.connect(transport);
const out = { protocolVersion: negotiated, server: client.getServerVersion(), results: [] };
for (const step of JSON.parse(steps)) {
  try {
    if (step.op === 'list') {
      out.results.push(await client.listTools());
    } else if (step.op === 'call') {
      // Runs under QEMU's TCG can take a while: more than the SDK's 60 s default.
      out.results.push(await client.callTool({ name: 'run_python', arguments: step.args }, undefined, { timeout: 180000 }));
    } else {
      out.results.push({ thrown: 'unknown op ' + step.op });
    }
  } catch (e) {
    out.results.push({ thrown: String(e) });
  }
}
await client.close();
process.stdout.write(JSON.stringify(out) + '\n');
