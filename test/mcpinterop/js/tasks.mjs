// Background tasks as MCP tasks through the TypeScript MCP SDK (pinned in
// package.json), run by TestTypeScriptSDKBackgroundTasks in test/mcpinterop:
//
//   node tasks.mjs http <url of session A> <url of session B> <bearer token>
//   node tasks.mjs stdio <port of session A> <port of session B>
//
// "stdio" is the SDK's stdio framing (its ReadBuffer and serializeMessage,
// what StdioClientTransport speaks over a child's pipes) over a TCP
// connection to Facade.ServeStdio in the test process.
//
// The tool brew (background, timeout 300 ms) reports the progress
// "brewing", then runs until the test releases it or its call is
// cancelled; brew_typed is the same with an output schema. The script
// prints one JSON object a line ({"step": ...}) and reads "release" on
// stdin once the test may release the brews.
import net from 'node:net';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ReadBuffer, serializeMessage } from '@modelcontextprotocol/sdk/shared/stdio.js';

const [mode, a, b, token] = process.argv.slice(2);
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const text = (res) => (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function expect(word) {
  const { value, done } = await lines.next();
  if (done || value.trim() !== word) throw new Error(`stdin: want ${word}, got ${done ? 'EOF' : value}`);
}

// SocketTransport is the SDK's stdio transport's framing over a socket.
class SocketTransport {
  constructor(port) { this.port = Number(port); this.buf = new ReadBuffer(); }
  async start() {
    this.sock = net.connect(this.port, '127.0.0.1');
    await new Promise((resolve, reject) => { this.sock.once('connect', resolve); this.sock.once('error', reject); });
    this.sock.on('data', (chunk) => {
      this.buf.append(chunk);
      for (;;) {
        let msg;
        try { msg = this.buf.readMessage(); } catch (err) { this.onerror?.(err); continue; }
        if (msg === null) break;
        this.onmessage?.(msg);
      }
    });
    this.sock.on('error', (err) => this.onerror?.(err));
    this.sock.on('close', () => this.onclose?.());
  }
  async send(msg) { this.sock.write(serializeMessage(msg)); }
  async close() { this.sock.end(); }
}

async function connect(where) {
  const client = new Client({ name: 'toolbus-interop-ts-tasks', version: '1' });
  const transport = mode === 'http'
    ? new StreamableHTTPClientTransport(new URL(where), { requestInit: { headers: { Authorization: `Bearer ${token}` } } })
    : new SocketTransport(where);
  await client.connect(transport);
  return client;
}

// poll asks until check returns a value (bounded: 600 tries, 50 ms apart).
async function poll(what, ask, check) {
  let last;
  for (let i = 0; i < 600; i++) {
    last = await ask();
    const got = check(last);
    if (got) return got;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${what}: never; last ${JSON.stringify(last)}`);
}

// startTask starts a task-augmented call and returns its id and the rest
// of its stream (the SDK polls tasks/get, then tasks/result).
async function startTask(client, name) {
  const stream = client.experimental.tasks.callToolStream({ name, arguments: {} }, undefined, { task: { ttl: 120000 } });
  const first = await stream.next();
  if (first.value?.type !== 'taskCreated') throw new Error(`no taskCreated: ${JSON.stringify(first.value)}`);
  const end = (async () => {
    for await (const msg of stream) {
      if (msg.type === 'result') return { text: text(msg.result), isError: !!msg.result.isError };
      if (msg.type === 'error') return { error: String(msg.error?.message ?? msg.error) };
    }
    return { error: 'the stream ended without a result' };
  })();
  return { id: first.value.task.taskId, end };
}

async function main() {
  const client = await connect(a);
  const other = await connect(b);
  out({ step: 'connect' });

  // A plain call past its timeout: a normal result naming the task.
  const plain = await client.callTool({ name: 'brew', arguments: {} });
  out({ step: 'plain', text: text(plain), isError: !!plain.isError, handle: plain._meta?.['io.toolbus/task']?.id ?? '' });
  // The same of a tool with an output schema: isError (no structured
  // content conforms), which the SDK accepts.
  try {
    const typed = await client.callTool({ name: 'brew_typed', arguments: {} });
    out({ step: 'typed', text: text(typed), isError: !!typed.isError, handle: typed._meta?.['io.toolbus/task']?.id ?? '' });
  } catch (err) {
    out({ step: 'typed', error: String(err?.message ?? err) });
  }

  // Three MCP tasks whose calls go on as bus tasks.
  const t1 = await startTask(client, 'brew');
  const t2 = await startTask(client, 'brew');
  const t3 = await startTask(client, 'brew');
  const background = (t) => (t.statusMessage ?? '').includes('in the background as bus task') && t.status === 'working';
  for (const t of [t1, t2, t3]) await poll(`task ${t.id} in the background`, () => client.experimental.tasks.getTask(t.id), background);
  // Its output read while it runs: tasks/get's status message.
  const message = await poll('output so far', () => client.experimental.tasks.getTask(t1.id),
    (t) => (t.statusMessage ?? '').includes('output so far: brewing') && t.statusMessage);
  out({ step: 'output', message });
  const listed = await client.experimental.tasks.listTasks();
  out({ step: 'listed', names: listed.tasks.map((t) => t.taskId).filter((id) => [t1.id, t2.id, t3.id].includes(id)) });

  // Another session's task: refused.
  try {
    const got = await other.experimental.tasks.getTask(t1.id);
    out({ step: 'other', error: `another session read the task: ${JSON.stringify(got)}` });
  } catch (err) {
    out({ step: 'other', message: String(err?.message ?? err) });
  }
  try {
    await other.experimental.tasks.cancelTask(t1.id);
    out({ step: 'other-cancel', error: 'another session cancelled the task' });
  } catch (err) {
    out({ step: 'other-cancel', message: String(err?.message ?? err) });
  }

  // Cancel stops it.
  const cancelled = await client.experimental.tasks.cancelTask(t3.id);
  out({ step: 'cancelled', status: cancelled.status });

  // A wait on two tasks returns both, once the test released them.
  out({ step: 'waiting' });
  await expect('release');
  const both = await Promise.all([t1.end, t2.end]);
  out({ step: 'both', names: both.map((r) => r.error ?? (r.isError ? 'isError: ' : '') + r.text) });
  const after = await client.experimental.tasks.getTask(t3.id);
  out({ step: 'after', message: after.status });
  await client.close();
  await other.close();
  out({ step: 'done' });
}

main().catch((err) => {
  out({ step: 'fatal', error: String(err?.stack ?? err) });
  process.exit(1);
});
