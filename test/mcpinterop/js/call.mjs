// One tools/call through the TypeScript SDK (pinned), for test/mcpinterop:
// node call.mjs <url> <bearer token> <tool> <arguments as JSON> [summary]. It
// prints {"step":"result","result":<the CallToolResult>} or
// {"step":"fatal",...}; with "summary", the result's shape instead of its
// bytes (for results of megabytes: texts cut at 300 characters, the
// structuredContent's count and number of lines).
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, token, tool, args, mode] = process.argv.slice(2);
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

async function main() {
  const client = new Client({ name: 'toolbus-interop-ts-call', version: '1' });
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  // listTools first: the SDK checks a result against the tool's listed
  // outputSchema only when it has seen the listing.
  const listed = await client.listTools();
  const def = listed.tools.find((t) => t.name === tool);
  out({ step: 'listed', names: def ? [def.name] : [], structured: def?.outputSchema ?? null });
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args) });
  if (mode === 'summary') {
    const sc = result.structuredContent;
    out({ step: 'result', result: {
      isError: result.isError ?? false,
      content: result.content.map((c) => ({ type: c.type, text: c.text?.slice(0, 300), uri: c.uri, size: c.size, description: c.description })),
      structured: sc ? { count: sc.count, lines: sc.lines?.length, last: sc.lines?.at(-1) } : null,
    } });
  } else {
    out({ step: 'result', result });
  }
  await client.close();
}

main().catch((err) => {
  out({ step: 'fatal', error: String(err?.stack ?? err) });
  process.exit(1);
});
