// The little every toolbus participant needs: CloudEvents in structured JSON
// mode on NATS (docs/protocol.md, section 1).
import { connect, createInbox, headers } from "@nats-io/transport-node";

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

// follow yields the stored messages of a consumer a router makes for
// subject (docs/protocol.md 3.4 and 6.2): it asks for one with an event of
// type create, then pulls through the router (io.toolbus.consumer.next: for
// replay the router relays the pull to JetStream with this inbox as the
// reply, so the messages come from the server itself; for the handoff it
// sends the requests of the parked records itself), and asks for another from the
// next sequence when the consumer is lost. It needs no JetStream
// permission: on a secured deployment, handlers and agents have none.
// typeOf is the CloudEvents type of a structured event message ("" when
// it is not one).
function typeOf(m) {
  try {
    return m.json().type ?? "";
  } catch {
    return "";
  }
}

export async function* follow(nc, subject, create, source, attrs = {}) {
  let consumer = null;
  let next = 0;
  while (!nc.isClosed()) {
    if (!consumer) {
      try {
        consumer = (await request(nc, subject, event(create, source, next ? { start_seq: next } : {}, attrs))).data.consumer;
      } catch {
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
    }
    let lost = true;
    try {
      const inbox = createInbox();
      const sub = nc.subscribe(inbox);
      const timer = setTimeout(() => sub.unsubscribe(), 15000); // no closing status: lost
      const [body, opts] = wire(event("io.toolbus.consumer.next", source, { consumer, batch: 64, expires_ms: 5000 }, attrs));
      nc.publish(subject, body, { ...opts, reply: inbox });
      let got = 0;
      for await (const m of sub) {
        // JetStream's status line, or the Status header a router relaying
        // handoff requests closes with (docs/protocol.md 6.2).
        const code = m.headers ? m.headers.code || Number(m.headers.get("Status")) || 0 : 0;
        if (code === 100) continue; // a heartbeat
        if (code === 404 || code === 408) { lost = false; break; } // nothing more now: pull again
        if (code !== 0) break; // 409 consumer gone
        if (m.subject === inbox && typeOf(m) === "io.toolbus.error") break; // the router refused
        if (m.reply) { // from JetStream: $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>...
          const t = m.reply.split(".");
          next = Number(t[t.length > 9 ? 7 : 5]) + 1;
        } else { // a handoff request the router relays: its stream sequence in Nats-Sequence
          next = Number(m.headers.get("Nats-Sequence")) + 1;
        }
        yield m;
        if (++got === 64) { lost = false; break; }
      }
      clearTimeout(timer);
      sub.unsubscribe();
    } catch {
      if (nc.isClosed()) return;
    }
    if (lost) consumer = null;
  }
}
