// An external handler: it registers the external tool ask_human, reads its
// requests from the handoff stream (also those made while it was offline)
// through a router-made consumer, and answers each. Written from
// docs/protocol.md (sections 6 and 8).
import { P, open, event, request, text, follow } from "./lib.mjs";

const source = "js/external-handler";
const tool = "ask_human";
const nc = await open();

await request(nc, `${P}.register.${tool}`, event("io.toolbus.register", source, { // the tool's own subject (7.1)
  worker: "js-external", tools: [{
    name: tool, description: "Ask a person a yes/no question.", external: true, permission: "allow",
    input_schema: { type: "object", properties: { question: { type: "string" } }, required: ["question"] },
  }],
}));

const messages = follow(nc, `${P}.handoff.external.${tool}`, "io.toolbus.handoff.follow", source);
console.log(JSON.stringify({ ready: tool }));

async function stop() {
  await nc.drain();
  process.exit(0);
}
process.on("SIGINT", stop);
process.on("SIGTERM", stop);

for await (const m of messages) {
  const req = m.json(); // io.toolbus.external.request
  const { sessionid, replyid, toolcallid } = req;
  const answer = { state: "success", output: text(`a person says yes to: ${req.data.call.input.question}`) };
  try {
    const ack = await request(nc, req.data.subject, event("io.toolbus.answer", source, answer, { sessionid, replyid, toolcallid }));
    console.log(JSON.stringify({ answered: toolcallid, ack: ack.data }));
  } catch (e) {
    // not_parked / already_answered: someone else was first, or it expired.
    console.log(JSON.stringify({ skipped: toolcallid, error: e.code }));
  }
}
