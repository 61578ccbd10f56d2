// A TypeScript SDK host (2025-11-25) behind an address that alternates
// its requests between two facade processes, run by
// TestAlternatingQuestionsAtOnce in test/mcpinterop (issue 29, F2):
// node questions.mjs <url> <token> <tool> <rounds>.
//
// Each round calls <tool> with {"for": "x<i>"}, and once the bridged
// server's question ("... (for x<i>).") is put to the host, again with
// {"for": "y<i>"}; the host answers "<for>-name", x's only once it was
// asked y's, so both questions are open at once. One JSON object a line:
// {"step": "round", "texts": [x's text, y's text]}.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

const [url, token, tool, count] = process.argv.slice(2);
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');
const text = (res) => (res.content ?? []).filter((c) => c.type === 'text').map((c) => c.text).join('');

// asked(who) resolves once the host was asked for who.
const gates = new Map();
function gate(who) {
  if (!gates.has(who)) {
    let open;
    const p = new Promise((resolve) => { open = resolve; });
    gates.set(who, { p, open });
  }
  return gates.get(who);
}

async function main() {
  const client = new Client({ name: 'toolbus-interop-ts-questions', version: '1' }, { capabilities: { elicitation: { form: {} } } });
  client.setRequestHandler(ElicitRequestSchema, async (req) => {
    const who = /\(for ([^)]*)\)/.exec(req.params.message)?.[1];
    if (!who) return { action: 'decline' };
    gate(who).open();
    if (who.startsWith('x')) await gate('y' + who.slice(1)).p;
    return { action: 'accept', content: { name: `${who}-name` } };
  });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  out({ step: 'connect', version: transport.protocolVersion });
  for (let i = 0; i < Number(count); i++) {
    const x = client.callTool({ name: tool, arguments: { for: `x${i}` } });
    await gate(`x${i}`).p;
    const y = client.callTool({ name: tool, arguments: { for: `y${i}` } });
    const results = await Promise.all([x, y]);
    out({ step: 'round', texts: results.map((r) => (r.isError ? 'error: ' : '') + text(r)) });
  }
  await client.close();
  out({ step: 'done' });
}

main().catch((err) => {
  out({ step: 'fatal', error: String(err?.stack ?? err) });
  process.exit(1);
});
