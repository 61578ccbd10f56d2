// An agent following background tasks (docs/protocol.md 5.10): three
// calls of js_brew outlive its 300 ms timeout and come back as task
// handles; it reads one's output while it runs, lists them, cancels one,
// signals the other two's kettles and waits for both, and sees each
// io.toolbus.task.done. Written from docs/protocol.md alone.
import { P, open, event, request } from "./lib.mjs";

const session = process.env.SESSION || "js-tasks";
const other = process.env.OTHER_SESSION || "js-tasks-other";
const source = "js/tasks";
const nc = await open();
const log = (o) => console.log(JSON.stringify(o));

// task sends one io.toolbus.task.query on P.tasks.<s> and returns the
// reply's data ({tasks, output?, truncated?}); a refusal throws (code).
const task = async (data, s = session) =>
  (await request(nc, `${P}.tasks.${s}`, event("io.toolbus.task.query", source, data, { sessionid: s }), 130000)).data;

// The session's events, from before the batch: io.toolbus.task.done of each task.
const ended = new Map();
const events = nc.subscribe(`${P}.events.${session}`);
const allEnded = (async () => {
  for await (const m of events) {
    const ev = m.json();
    if (ev.type === "io.toolbus.task.done") ended.set(ev.data.id, ev.data.state);
    if (ended.size === 3) return;
  }
})();
await nc.flush();

const replyId = `r-tasks-${Date.now()}`;
const reply = (await request(nc, `${P}.call.${session}`, event("io.toolbus.call.batch", source, {
  calls: ["a", "b", "c"].map((pot, i) => ({ id: `c${i + 1}`, name: "js_brew", input: { pot } })),
}, { id: replyId, sessionid: session }), 20000)).data;
const ids = reply.results.map((r) => r.task?.id);
log({ handles: reply.results.map((r) => [r.state, r.task?.state, r.task?.subject === `${P}.tasks.${session}`]) });

// The output so far, while it runs (stored asynchronously: asked again until there).
let out;
for (let i = 0; i < 600; i++) {
  out = await task({ op: "output", ids: [ids[0]] });
  if (out.output?.length) break;
  await new Promise((r) => setTimeout(r, 50));
}
log({ output: out.tasks[0].state, text: out.output.map((b) => b.text) });
log({ listed: (await task({ op: "list" })).tasks.filter((t) => ids.includes(t.id)).length });

// Another session cannot see or stop this session's task.
for (const op of ["get", "cancel"]) {
  try {
    await task({ op, ids: [ids[0]] }, other);
    log({ other: op, code: "accepted" });
  } catch (e) {
    log({ other: op, code: e.code });
  }
}

const cancelled = (await task({ op: "cancel", ids: [ids[2]] })).tasks[0];
log({ cancelled: cancelled.state, code: cancelled.result?.error?.code });

// A wait on two tasks returns both once they end: signal their kettles.
nc.publish("kettle.a");
nc.publish("kettle.b");
const waited = await task({ op: "wait", ids: ids.slice(0, 2), timeout_ms: 60000 });
log({ waited: waited.tasks.map((t) => [t.state, t.result?.output?.[0]?.text]) });

const timer = setTimeout(() => events.unsubscribe(), 30000);
await allEnded;
clearTimeout(timer);
log({ ended: ids.map((id) => ended.get(id)) });
await nc.drain();
