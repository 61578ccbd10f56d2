// An agent: list the tools (and the deferred ones), switch a group with
// reset_tools as a provider's tool search load would, call a batch,
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

// A deferred listing (docs/protocol.md 4.1) adds the tools of inactive meta
// groups for the provider's own tool search, and names each one's group.
const listing = (await request(nc, `${P}.tools.${session}`,
  event("io.toolbus.tools.query", source, { format: "anthropic", deferred: true }, { sessionid: session }))).data;
log({ deferred: listing.deferred });

// afterLoads is the final set of meta groups once the provider's search
// loaded these tools: the active meta groups, then the loaded tools' groups
// (4.2, "Loads through the provider"); a tool not offered deferred is ignored.
const afterLoads = (l, tools) => {
  const final = l.groups.filter((g) => g.scope === "meta" && g.active).map((g) => g.name);
  for (const t of tools) {
    const g = (l.deferred || {})[t];
    if (g && !final.includes(g)) final.push(g);
  }
  return final;
};

// Say the model's search loaded js_count: reset_tools takes the final set.
const input = Object.fromEntries(afterLoads(listing, ["js_count", "no_such_tool"]).map((g) => [g, true]));
const reset = await call(`r-reset-${Date.now()}`, { calls: [{ id: "c1", name: "reset_tools", input }] });
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
