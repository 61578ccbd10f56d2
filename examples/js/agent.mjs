// An agent: list the tools, switch a group with reset_tools, call a batch,
// follow its events, and answer a call that parks. Written from
// docs/protocol.md (sections 3, 4 and 6).
import { P, open, event, request, text } from "./lib.mjs";

const session = process.env.SESSION || "js-agent";
const source = "js/agent";
const nc = await open();
const log = (o) => console.log(JSON.stringify(o));

const tools = async (req) => (await request(nc, `${P}.tools.${session}`,
  event("io.toolbus.tools.query", source, { format: "openai", ...(req && { request: req }) }, { sessionid: session }))).data.tools;

// sessionrev is the session revision of the last reply (docs/protocol.md
// 4.2), sent back with the next batch so that a router whose cached session
// is that new need not read it.
let sessionrev;

// call sends one batch (the event id is the reply id) and returns the
// reply; onEvent sees every event of the batch until io.toolbus.batch.done,
// which done resolves to. Only calls that finish after the reply (parked
// ones here) get an io.toolbus.call.result of their own (3.4).
async function call(replyId, data, onEvent = () => {}) {
  if (sessionrev) data = { ...data, sessionrev };
  const sub = nc.subscribe(`${P}.events.${session}`);
  await nc.flush(); // subscribed before the batch goes out
  const timer = setTimeout(() => sub.unsubscribe(), 20000);
  const done = (async () => {
    for await (const m of sub) {
      const ev = m.json();
      if (ev.replyid !== replyId) continue;
      await onEvent(ev);
      if (ev.type === "io.toolbus.batch.done") {
        clearTimeout(timer);
        sub.unsubscribe();
        return ev.data.results;
      }
    }
    throw new Error(`no batch.done for ${replyId} in time`);
  })();
  const reply = await request(nc, `${P}.call.${session}`,
    event("io.toolbus.call.batch", source, data, { id: replyId, sessionid: session }), 20000);
  if (reply.data.sessionrev) sessionrev = reply.data.sessionrev;
  return { reply: reply.data, done };
}

const answer = (p, data, attrs) => request(nc, p.subject, event("io.toolbus.answer", source, data, attrs));

log({ tools: (await tools()).map((t) => t.function.name) });

// reset_tools takes the final set of meta groups.
const reset = await call(`r-reset-${Date.now()}`, { calls: [{ id: "c1", name: "reset_tools", input: { js_slow: true } }] });
await reset.done;
log({ reset: reset.reply.results[0].output[0].text });

const pickColor = { name: "pick_color", description: "Ask the user for a colour.", input_schema: { type: "object", properties: {} } };
const replyId = `r-${Date.now()}`;
const { reply, done } = await call(replyId, {
  calls: [
    { id: "c1", name: "js_add", input: { a: 2, b: 3 } },
    { id: "c2", name: "js_count", input: "{\"n\": 3}" },
    { id: "c3", name: "ask_human", input: { question: "ship it?" } },
    { id: "c4", name: "pick_color", input: {} },
  ],
  user: "alice", context: { tenant: "acme" },
  request: { merge_mode: "merge_external_priority", external_tools: [pickColor] },
}, async (ev) => {
  switch (ev.type) {
    case "io.toolbus.call.progress": log({ progress: ev.toolcallid, seq: ev.data.seq, text: ev.data.output[0].text }); break;
    case "io.toolbus.call.result": log({ result: ev.data.name, state: ev.data.state }); break;
    case "io.toolbus.call.parked":
      for (const p of ev.data.calls) {
        log({ parked: p.name, kind: p.kind, subject: p.subject });
        // A request-scoped external tool is executed by the caller itself.
        if (p.name === "pick_color") {
          const ack = await answer(p, { state: "success", output: text("teal") }, { sessionid: session, replyid: replyId, toolcallid: p.id });
          log({ answered: p.name, accepted: ack.data.accepted });
        }
      }
      break;
  }
});
log({ reply_results: reply.results.map((r) => r.name), reply_parked: reply.parked.map((p) => p.name) });
for (const r of await done) log({ final: r.name, state: r.state, text: r.output[0]?.text });
await nc.drain();
