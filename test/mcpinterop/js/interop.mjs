// A host written with the TypeScript MCP SDK (pinned in package.json and
// its lockfile), run by TestTypeScriptSDK in test/mcpinterop against the
// toolbus facade: node interop.mjs <url> <bearer token>.
//
// It prints one JSON object a line ({"step": ..., ...}; "error" when a
// step failed) and reads one word a line on stdin where the Go test must
// act first: "abort" (the wait call reached the worker: abort it) and
// "changed" (the test changed the session's tools: expect list_changed).
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, token] = process.argv.slice(2);
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const text = (res) => (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function expect(word) {
  const { value, done } = await lines.next();
  if (done || value.trim() !== word) throw new Error(`stdin: want ${word}, got ${done ? 'EOF' : value}`);
}

let changed = null; // resolves on the next tools/list_changed
const nextChange = () => new Promise((resolve) => { changed = resolve; });

async function main() {
  const client = new Client({ name: 'toolbus-interop-ts', version: '1' }, { capabilities: { elicitation: { form: {} } } });
  let decision = 'allow';
  const asked = [];
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    asked.push(req.params.message);
    return { action: 'accept', content: { decision } };
  });
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => { if (changed) changed(); });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  out({ step: 'connect', version: transport.protocolVersion, server: client.getServerVersion()?.name });

  const listed = await client.listTools();
  out({ step: 'list', names: listed.tools.map((t) => t.name).sort() });

  out({ step: 'call', text: text(await client.callTool({ name: 'hello', arguments: { name: 'ts' } })) });

  // A tool with an output schema: the SDK refuses a result without
  // structuredContent, and checks it against the schema.
  try {
    const res = await client.callTool({ name: 'stats', arguments: {} });
    out({ step: 'structured', structured: res.structuredContent ?? null, text: text(res) });
  } catch (err) {
    out({ step: 'structured', error: String(err?.message ?? err) });
  }

  // Cancel: abort the wait call once the test says it runs at the worker.
  const ac = new AbortController();
  const waiting = client.callTool({ name: 'wait', arguments: {} }, undefined, { signal: ac.signal });
  out({ step: 'waiting' });
  await expect('abort');
  ac.abort('the host gave up');
  try {
    await waiting;
    out({ step: 'cancel', error: 'the aborted call returned a result' });
  } catch (err) {
    out({ step: 'cancel', aborted: ac.signal.aborted, message: String(err?.message ?? err) });
  }
  out({ step: 'again', text: text(await client.callTool({ name: 'hello', arguments: { name: 'again' } })) });

  // A confirmation answered through elicitation (allow, then deny).
  let res = await client.callTool({ name: 'deploy', arguments: {} });
  out({ step: 'allow', text: text(res), isError: !!res.isError, asked: asked.splice(0) });
  decision = 'deny';
  res = await client.callTool({ name: 'deploy', arguments: {} });
  out({ step: 'deny', text: text(res), isError: !!res.isError, asked: asked.splice(0) });

  // list_changed after the test activates a group.
  const change = nextChange();
  out({ step: 'listening' });
  await expect('changed');
  await change;
  out({ step: 'changed', names: (await client.listTools()).tools.map((t) => t.name).sort() });

  // A task-augmented call (the SDK's experimental tasks API).
  const kinds = [];
  let result = null;
  for await (const msg of client.experimental.tasks.callToolStream({ name: 'hello', arguments: { name: 'task' } }, undefined, { task: { ttl: 60000 } })) {
    kinds.push(msg.type);
    if (msg.type === 'result') result = text(msg.result);
    if (msg.type === 'error') result = 'error: ' + String(msg.error?.message ?? msg.error);
  }
  out({ step: 'task', kinds, text: result });

  // A parked call (an external tool) held open with progress notices
  // until the test answers it on the bus.
  let notices = 0;
  const parked = client.callTool({ name: 'ask_human', arguments: {} }, undefined, {
    onprogress: () => { notices++; }, resetTimeoutOnProgress: true,
  });
  out({ step: 'parking' });
  res = await parked;
  out({ step: 'parked', text: text(res), isError: !!res.isError, notices });

  // The same without a progress token: the facade answers before the
  // SDK's own 60 s timeout that the call is still parked.
  res = await client.callTool({ name: 'ask_human', arguments: {} });
  out({ step: 'quiet', text: text(res), isError: !!res.isError });

  await client.close();
  out({ step: 'done' });
}

main().catch((err) => {
  out({ step: 'fatal', error: String(err?.stack ?? err) });
  process.exit(1);
});
