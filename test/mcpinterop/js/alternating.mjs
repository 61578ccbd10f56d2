// A TypeScript SDK host (2025-11-25) behind an address that alternates
// its requests between two facade processes, run by TestAlternatingFront
// in test/mcpinterop (issue 29, F2): node alternating.mjs <url> <token> <n>.
//
// It confirms n deploys through elicitation (its answers reach either
// process), then aborts n wait calls, each once the test says it runs
// ("abort" on stdin), and calls hello after each. One JSON object a line.
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, token, count] = process.argv.slice(2);
const n = Number(count);
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const text = (res) => (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function expect(word) {
  const { value, done } = await lines.next();
  if (done || value.trim() !== word) throw new Error(`stdin: want ${word}, got ${done ? 'EOF' : value}`);
}

async function main() {
  const client = new Client({ name: 'toolbus-interop-ts-alternating', version: '1' }, { capabilities: { elicitation: { form: {} } } });
  let asked = 0;
  client.setRequestHandler(ElicitRequestSchema, async () => {
    asked++;
    return { action: 'accept', content: { decision: 'allow' } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  out({ step: 'connect', version: transport.protocolVersion });
  for (let i = 0; i < n; i++) {
    const res = await client.callTool({ name: 'deploy', arguments: {} });
    out({ step: 'deploy', text: text(res), isError: !!res.isError, notices: asked });
  }
  for (let i = 0; i < n; i++) {
    const ac = new AbortController();
    const waiting = client.callTool({ name: 'wait', arguments: {} }, undefined, { signal: ac.signal });
    out({ step: 'waiting' });
    await expect('abort');
    ac.abort('the host gave up');
    try {
      await waiting;
      out({ step: 'cancel', error: 'the aborted call returned a result' });
    } catch (err) {
      out({ step: 'cancel', aborted: ac.signal.aborted });
    }
    out({ step: 'again', text: text(await client.callTool({ name: 'hello', arguments: { name: 'again' } })) });
  }
  await client.close();
  out({ step: 'done' });
}

main().catch((err) => {
  out({ step: 'fatal', error: String(err?.stack ?? err) });
  process.exit(1);
});
