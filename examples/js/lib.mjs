// The little every toolbus participant needs: CloudEvents in structured JSON
// mode on NATS (docs/protocol.md, section 1).
import { connect, headers } from "@nats-io/transport-node";

export const P = process.env.TOOLBUS_PREFIX || "toolbus";

export function open() {
  return connect({ servers: process.env.NATS_URL || "nats://127.0.0.1:4222" });
}

let n = 0;

// event returns a CloudEvent; attrs adds extension attributes (sessionid,
// replyid, toolcallid, subject) or overrides id.
export function event(type, source, data, attrs = {}) {
  return {
    specversion: "1.0", id: `${source.replace(/[^A-Za-z0-9_-]/g, "-")}-${Date.now()}-${n++}`, source, type,
    datacontenttype: "application/json", time: new Date().toISOString(), ...attrs, data,
  };
}

// wire returns the body and options of a NATS message carrying ev.
export function wire(ev) {
  const h = headers();
  h.set("content-type", "application/cloudevents+json");
  return [JSON.stringify(ev), { headers: h }];
}

export function publish(nc, subject, ev) {
  nc.publish(subject, ...wire(ev));
}

// request sends ev and returns the reply event; io.toolbus.error throws.
export async function request(nc, subject, ev, timeout = 10000) {
  const [body, opts] = wire(ev);
  const reply = (await nc.request(subject, body, { ...opts, timeout })).json();
  if (reply.type === "io.toolbus.error") {
    const err = new Error(`${reply.data.code}: ${reply.data.message}`);
    err.code = reply.data.code;
    throw err;
  }
  return reply;
}

export const text = (s) => [{ type: "text", text: s }];
