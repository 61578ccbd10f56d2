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
// replay the router relays the pull to JetStream with this follower's reply
// subject, so the messages come from the server itself; for the handoff it
// sends the requests of the parked records itself), and asks for another
// from the next sequence when the consumer is lost. It needs no JetStream
// permission: on a secured deployment, handlers and agents have none.
//
// As protocol 1.9 asks, one subscription on <inbox>.* is made before the
// consumer and kept for its life, each pull has its own reply subject
// <inbox>.<n>, and only a pull's own closing status ends it. When the
// router's ready says "heartbeat": true, pulls ask for one every second;
// a pull that hears nothing for two is sent again, and after the third
// such pull the consumer is asked for again.
const BATCH = 64;
const WAIT_MS = 5000;
const BEAT_MS = 1000;
const SILENCES = 3;

// typeOf is the CloudEvents type of a structured event message ("" when
// it is not one).
function typeOf(m) {
  try {
    return m.json().type ?? "";
  } catch {
    return "";
  }
}

// seqOf is the stream sequence of a delivered message: from JetStream's
// reply subject ($JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>...,
// with a domain and account hash before the stream when longer), or from
// Nats-Sequence on a handoff request the router relays.
function seqOf(m) {
  if (m.reply && m.reply.startsWith("$JS.ACK.")) {
    const t = m.reply.split(".");
    return Number(t[t.length > 9 ? 7 : 5]);
  }
  return Number(m.headers?.get("Nats-Sequence") || 0);
}

// mailbox subscribes subject and returns next(ms): the next message, or
// null when none comes within ms.
function mailbox(nc, subject) {
  const queue = [];
  let wake = null;
  const sub = nc.subscribe(subject, {
    callback: (err, m) => {
      if (!err) queue.push(m);
      if (wake) wake();
    },
  });
  const next = (ms) => {
    if (queue.length) return Promise.resolve(queue.shift());
    return new Promise((resolve) => {
      const timer = setTimeout(() => { wake = null; resolve(null); }, ms);
      wake = () => { clearTimeout(timer); wake = null; resolve(queue.shift() ?? null); };
    });
  };
  return { next, close: () => sub.unsubscribe() };
}

export async function* follow(nc, subject, create, source, attrs = {}) {
  let next = 0;
  while (!nc.isClosed()) {
    const inbox = createInbox();
    const box = mailbox(nc, `${inbox}.*`);
    let ready;
    try {
      ready = (await request(nc, subject, event(create, source, next ? { start_seq: next } : {}, attrs))).data;
    } catch {
      box.close();
      await new Promise((r) => setTimeout(r, 1000));
      continue;
    }
    const quiet = ready.heartbeat ? 2 * BEAT_MS : WAIT_MS + 10000;
    let pulls = 0;
    let silent = 0;
    let lost = false;
    while (!lost && !nc.isClosed()) {
      const reply = `${inbox}.${++pulls}`;
      const data = { consumer: ready.consumer, batch: BATCH, expires_ms: WAIT_MS };
      if (ready.heartbeat) data.heartbeat_ms = BEAT_MS;
      const [body, opts] = wire(event("io.toolbus.consumer.next", source, data, attrs));
      nc.publish(subject, body, { ...opts, reply });
      for (let got = 0; got < BATCH; ) {
        const m = await box.next(quiet);
        if (!m) { // silence: with heartbeats, pull again, and ask anew after the third
          lost = !ready.heartbeat || ++silent >= SILENCES;
          break;
        }
        silent = 0;
        // JetStream's status line, or the Status header a router relaying
        // handoff requests closes with (docs/protocol.md 6.2).
        const code = m.headers ? m.headers.code || Number(m.headers.get("Status")) || 0 : 0;
        if (code === 100) continue; // a heartbeat
        if (code !== 0 || (!m.reply?.startsWith("$JS.ACK.") && typeOf(m) === "io.toolbus.error")) {
          if (m.subject !== reply) continue; // an earlier pull's end: this one goes on
          if (code === 404 || code === 408) break; // nothing more now: pull again
          lost = true; // 409 consumer gone, the router's refusal ...
          break;
        }
        got++;
        next = Math.max(next, seqOf(m) + 1);
        yield m;
      }
    }
    box.close();
    if (lost && !nc.isClosed()) {
      // Stop the consumer (the server would drop it once idle anyway).
      publish(nc, subject, event("io.toolbus.consumer.stop", source, { consumer: ready.consumer }, attrs));
    }
  }
}
