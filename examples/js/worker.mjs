// A toolbus worker: two tools (js_count reports progress), heartbeats, and
// leaving on exit. Written from docs/protocol.md (sections 5 and 7). It declares
// no binary_exec (7.1), so routers send it structured mode only (5.1).
import { P, open, event, publish, request, wire, text } from "./lib.mjs";

const id = process.env.WORKER_ID || `js-${process.pid}`;
const source = `toolbus/worker/${id}`;
const heartbeatMs = Number(process.env.HEARTBEAT_MS || 5000);

const groups = [{ name: "js_slow", description: "Slow tools that report progress.", scope: "meta" }];
const tools = [
  {
    name: "js_add", description: "Add two numbers.", read_only: true,
    input_schema: { type: "object", properties: { a: { type: "number" }, b: { type: "number" } }, required: ["a", "b"] },
  },
  {
    name: "js_count", description: "Count to n, one progress event a step.", groups: ["js_slow"], permission: "allow",
    input_schema: { type: "object", properties: { n: { type: "integer", minimum: 1, maximum: 10 } }, required: ["n"] },
  },
  // Past its timeout a call goes on as a background task (5.10) instead
  // of ending "timeout": the worker notices nothing and keeps running it.
  {
    name: "js_brew", description: "Brew a pot; done when its kettle signals (a message on kettle.<pot>).", read_only: true,
    background: true, timeout_ms: 300,
    input_schema: { type: "object", properties: { pot: { type: "string", pattern: "^[a-z0-9]{1,16}$" } }, required: ["pot"] },
  },
];
const handlers = {
  js_add: async ({ a, b }) => `${a} + ${b} = ${a + b}`,
  js_count: async ({ n }, progress, signal) => {
    for (let i = 1; i <= n; i++) {
      if (signal.aborted) throw new Error("cancelled");
      progress(`step ${i} of ${n}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return `counted to ${n}`;
  },
  js_brew: async ({ pot }, progress, signal) => {
    const kettle = nc.subscribe(`kettle.${pot}`, { max: 1 });
    await nc.flush(); // the server has the subscription before anyone reads "brewing"
    progress(`brewing ${pot}`);
    const stop = () => kettle.unsubscribe();
    signal.addEventListener("abort", stop);
    for await (const _ of kettle); // ends with the signal's message, or unsubscribed on abort
    signal.removeEventListener("abort", stop);
    if (signal.aborted) {
      console.log(JSON.stringify({ stopped: pot }));
      throw new Error("cancelled");
    }
    return `${pot} brewed`;
  },
};

const nc = await open();
const running = new Map(); // "<session> <replyid> <callid>" → AbortController

async function exec(tool, m) {
  const ev = m.json();
  const { sessionid, replyid, toolcallid } = ev;
  const key = `${sessionid} ${replyid} ${toolcallid}`;
  const ctl = new AbortController();
  running.set(key, ctl);
  let seq = 0;
  // Progress: the worker itself publishes on P.events.<session>.
  const progress = (s) => publish(nc, `${P}.events.${sessionid}`, event("io.toolbus.call.progress", source,
    { seq: ++seq, output: text(s) }, { sessionid, replyid, toolcallid, subject: toolcallid }));
  let data;
  try {
    data = { state: "success", output: text(await handlers[tool](ev.data.call.input, progress, ctl.signal)) };
  } catch (e) {
    data = { state: ctl.signal.aborted ? "interrupted" : "error", output: text(`Error: ${e.message}`) };
  } finally {
    running.delete(key);
  }
  m.respond(...wire(event("io.toolbus.exec.result", source, data, { sessionid, replyid, toolcallid })));
}

for (const t of tools) {
  nc.subscribe(`${P}.exec.${t.name}`, { queue: `${P}-exec-${t.name}`, callback: (err, m) => err || exec(t.name, m) });
}
// Every worker hears every cancel (no queue group).
nc.subscribe(`${P}.cancel.>`, {
  callback: (err, m) => {
    if (err) return;
    const ev = m.json();
    const session = m.subject.slice(`${P}.cancel.`.length);
    for (const [key, ctl] of running) {
      const [s, r, c] = key.split(" ");
      if (s === session && r === ev.replyid && (!ev.data?.calls || ev.data.calls.includes(c))) ctl.abort();
    }
  },
});
await nc.flush();

// Each group registers on P.register.group.<group> and each tool on
// P.register.<tool> (protocol 7.1, 1.12): the first time one after another
// (routers list tools in the order of their first registration), then all
// at once; a heartbeat is the same requests, sent again.
const send = (subject, data) => request(nc, subject, event("io.toolbus.register", source, { worker: id, ...data }));
let registered = false;
const register = async () => {
  const requests = [
    ...groups.map((g) => () => send(`${P}.register.group.${g.name}`, { groups: [g] })),
    ...tools.map((t) => () => send(`${P}.register.${t.name}`, { tools: [t] })),
  ];
  const acks = [];
  if (registered) acks.push(...(await Promise.all(requests.map((r) => r()))));
  else for (const r of requests) acks.push(await r());
  registered = true;
  const toolAcks = acks.slice(groups.length).map((a) => a.data);
  return { accepted: toolAcks.flatMap((a) => a.accepted), rejected: toolAcks.flatMap((a) => a.rejected) };
};
const ack = await register();
console.log(JSON.stringify({ ready: id, ...ack }));
const beat = setInterval(() => register().catch((e) => console.error(`heartbeat: ${e.message}`)), heartbeatMs);

async function leave() {
  clearInterval(beat);
  await Promise.all(tools.map((t) => send(`${P}.register.${t.name}`, { leaving: true }))); // one leave per tool
  console.log(JSON.stringify({ left: id }));
  await nc.drain();
  process.exit(0);
}
process.on("SIGINT", leave);
process.on("SIGTERM", leave);
