// toolbus approval inbox: plain JavaScript, no framework, no build step.
// The list comes from /api/events (server-sent events, read with fetch to
// send the token's header); every answer is a POST to /api/act bound to
// the call's key, revision and input digest.
"use strict";
(function () {
  // The token, kept in this tab's sessionStorage (per origin, port
  // included): a cookie would go to every server on this host (session 38,
  // TestAttackTokenToAnotherPort). The page gets it for the one-time code
  // of the link it was opened with, or from the person (the login form):
  // never from the address, which the browser's history keeps (session 39,
  // TestAttackTokenInHistory).
  const KEY = "toolbus-inbox-token";
  let token = sessionStorage.getItem(KEY) || "";
  const code = new URLSearchParams(location.search).get("code");
  if (code) history.replaceState(null, "", "/"); // out of the address bar
  const FOLD = 2000; // inputs longer than this (pretty) are folded
  const calls = new Map(); // key -> item, as the server last sent
  const cards = new Map(); // key -> card element
  const refusals = new Map(); // key -> message shown on the card
  let selected = null; // key
  const $ = (sel, el) => (el || document).querySelector(sel);
  const list = $("#calls");

  // Control and bidirectional characters are shown as \uXXXX: an input,
  // reason or rule holding U+202E (right-to-left override) or U+2066..9
  // was shown reordered, so the page could show other text than the call's
  // (session 18, red team: TestAttackInboxBidi).
  const unseen = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  function plain(s) {
    return String(s).replace(unseen, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  }
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = plain(text);
    return e;
  }
  function pretty(v) {
    if (v === undefined || v === null) return "{}";
    try { return JSON.stringify(v, null, 2); } catch (_) { return String(v); }
  }
  function userText(u) {
    if (u === undefined || u === null) return "";
    return typeof u === "string" ? u : JSON.stringify(u);
  }
  function age(ms) {
    let s = Math.max(0, Math.floor(ms / 1000));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + String(Math.floor(s % 86400 / 3600)).padStart(2, "0") + "h";
  }
  function ruleText(r) {
    return r.tool + (r.pattern ? "(" + r.pattern + ")" : "") + (r.behavior && r.behavior !== "allow" ? " " + r.behavior : "");
  }

  function flash(msg, ok) {
    const f = $("#flash");
    f.textContent = plain(msg);
    f.className = "flash " + (ok ? "ok" : "error");
    f.hidden = false;
  }

  // send answers item with act ({action, rules, reason, ...}): the key,
  // revision and digest are those of item as the page holds it.
  async function send(item, act) {
    const body = Object.assign({ key: item.key, revision: item.revision, input_digest: item.input_digest }, act);
    let out;
    try {
      const res = await fetch("/api/act", {
        method: "POST",
        headers: { "Content-Type": "application/json", "X-Toolbus-Token": token },
        body: JSON.stringify(body),
      });
      out = await res.json().catch(() => ({ ok: false, message: "HTTP " + res.status }));
    } catch (e) {
      out = { ok: false, message: "the inbox did not answer: " + e };
    }
    if (out.ok) {
      refusals.delete(item.key);
      flash(out.message, true);
    } else {
      refusals.set(item.key, out.message);
      flash("Refused: " + out.message, false);
    }
    const card = cards.get(item.key);
    if (card) showRefusal(card, item.key);
    return out;
  }

  function showRefusal(card, key) {
    const r = $(".refusal", card);
    const msg = refusals.get(key);
    r.hidden = !msg;
    r.textContent = msg ? "Refused: " + plain(msg) : "";
  }

  function chosenRules(card, item) {
    const out = [];
    card.querySelectorAll("input.rule").forEach((c) => { if (c.checked) out.push(item.suggested_rules[+c.dataset.i]); });
    return out;
  }

  function allow(key, remember) {
    const item = calls.get(key), card = cards.get(key);
    if (!item || item.kind !== "confirm" || item.note) return;
    const rules = remember ? chosenRules(card, item) : [];
    if (remember && rules.length === 0) { flash("Choose at least one suggested rule to remember.", false); return; }
    send(item, { action: "allow", rules: rules });
  }
  function deny(key) {
    const item = calls.get(key), card = cards.get(key);
    if (!item || item.kind !== "confirm" || item.note) return;
    send(item, { action: "deny", reason: $("input.reason", card).value });
  }
  function answer(key) {
    const item = calls.get(key), card = cards.get(key);
    if (!item || item.kind !== "external" || item.note) return;
    send(item, { action: "answer", format: $("select.format", card).value, state: $("select.state", card).value, output: $("textarea.output", card).value });
  }

  function card(item) {
    const c = el("article", "call");
    c.dataset.key = item.key;
    const head = el("div", "head");
    head.append(el("span", "chev"), el("span", "tool", item.tool), el("span", "kind " + item.kind, item.kind),
      el("span", "session muted", "session " + item.session), el("span", "user muted", userText(item.user) ? "user " + userText(item.user) : "no user"),
      el("span", "age muted"), el("span", "deadline muted"));
    head.addEventListener("click", () => { select(item.key); toggle(item.key); });
    const body = el("div", "body");
    const meta = el("dl", "meta");
    const row = (k, v) => { meta.append(el("dt", "", k), el("dd", "", v)); };
    row("call", item.id + " (reply " + item.reply_id + ")");
    row("session", item.session);
    if (userText(item.user)) row("user", userText(item.user));
    if (item.context) row("context", JSON.stringify(item.context));
    if (item.reason) row("why", item.reason);
    row("digest", item.input_digest);
    row("parked", new Date(item.created).toLocaleString());
    row("expires", new Date(item.expires).toLocaleString());
    body.append(meta, el("div", "muted", "input"));
    const text = pretty(item.input);
    if (text.length > FOLD) {
      const d = el("details", "fold");
      d.append(el("summary", "", "input: " + text.length + " characters, folded — show all"), el("pre", "input", text));
      body.append(el("pre", "input-head", text.slice(0, FOLD) + "\n…"), d);
    } else {
      body.append(el("pre", "input", text));
    }
    if (item.note) body.append(el("p", "note", item.note));
    const acts = el("div", "actions");
    if (item.kind === "confirm" && !item.note) {
      if (item.suggested_rules && item.suggested_rules.length) {
        const rules = el("div", "rules");
        rules.append(el("span", "muted", "remember:"));
        item.suggested_rules.forEach((r, i) => {
          const l = el("label"), cb = el("input", "rule");
          cb.type = "checkbox"; cb.dataset.i = i; cb.checked = i === 0;
          l.append(cb, document.createTextNode(" " + plain(ruleText(r))));
          rules.append(l);
        });
        body.append(rules);
      }
      const a = el("button", "allow", "Allow"), r = el("button", "remember", "Allow & remember"),
        reason = el("input", "reason"), d = el("button", "deny", "Deny");
      r.disabled = !(item.suggested_rules && item.suggested_rules.length);
      reason.placeholder = "reason for a denial (the agent sees it)";
      a.type = r.type = d.type = "button";
      a.addEventListener("click", () => allow(item.key, false));
      r.addEventListener("click", () => allow(item.key, true));
      d.addEventListener("click", () => deny(item.key));
      acts.append(a, r, reason, d);
    } else if (item.kind === "external" && !item.note) {
      const out = el("textarea", "output"), fmt = el("select", "format"), st = el("select", "state"), b = el("button", "answer", "Answer");
      out.placeholder = "the tool's output: text, or JSON with format json";
      [["text", "text"], ["json", "JSON"]].forEach(([v, t]) => { const o = el("option", "", t); o.value = v; fmt.append(o); });
      [["success", "success"], ["error", "error (the tool failed)"]].forEach(([v, t]) => { const o = el("option", "", t); o.value = v; st.append(o); });
      b.type = "button";
      b.addEventListener("click", () => answer(item.key));
      acts.append(out, fmt, st, b);
    }
    body.append(acts);
    const ref = el("p", "refusal"); ref.hidden = true;
    body.append(ref);
    c.append(head, body);
    return c;
  }

  function tick() {
    const now = Date.now();
    for (const [key, c] of cards) {
      const item = calls.get(key);
      $(".age", c).textContent = age(now - Date.parse(item.created)) + " ago";
      const left = Date.parse(item.expires) - now;
      $(".deadline", c).textContent = left > 0 ? "expires in " + age(left) : "expired";
    }
  }

  function filters() {
    return ["session", "tool", "user"].map((n) => [n, $("#f-" + n).value.trim().toLowerCase()]);
  }
  function visible(item) {
    return filters().every(([n, v]) => {
      if (!v) return true;
      const have = n === "session" ? item.session : n === "tool" ? item.tool : userText(item.user);
      return have.toLowerCase().includes(v);
    });
  }

  function render(data) {
    const seen = new Set();
    data.calls = data.calls || []; // null when nothing waits
    for (const item of data.calls) {
      seen.add(item.key);
      const old = calls.get(item.key);
      calls.set(item.key, item);
      if (!cards.has(item.key) || (old && old.revision !== item.revision)) {
        const open = cards.has(item.key) && cards.get(item.key).classList.contains("open");
        const c = card(item);
        if (open) c.classList.add("open");
        if (cards.has(item.key)) cards.get(item.key).replaceWith(c);
        cards.set(item.key, c);
        showRefusal(c, item.key);
      }
    }
    for (const key of [...cards.keys()]) {
      if (!seen.has(key)) { cards.get(key).remove(); cards.delete(key); calls.delete(key); }
    }
    // Order as the server sends: oldest first.
    data.calls.forEach((item) => list.append(cards.get(item.key)));
    applyFilters();
    if (selected && !cards.has(selected)) selected = null;
    markSelected();
    tick();
    const more = data.total > data.calls.length ? " (showing " + data.calls.length + ")" : "";
    $("#count").textContent = data.total + " waiting" + more;
    $("#empty").hidden = data.total > 0;
  }

  function applyFilters() {
    for (const [key, c] of cards) c.hidden = !visible(calls.get(key));
  }
  function shown() { return [...list.children].filter((c) => !c.hidden).map((c) => c.dataset.key); }
  function select(key) { selected = key; markSelected(); }
  function markSelected() {
    for (const [key, c] of cards) c.classList.toggle("selected", key === selected);
    if (selected) cards.get(selected).scrollIntoView({ block: "nearest" });
  }
  function toggle(key) { const c = cards.get(key); if (c) c.classList.toggle("open"); }
  function move(d) {
    const keys = shown();
    if (!keys.length) return;
    let i = keys.indexOf(selected);
    i = i < 0 ? (d > 0 ? 0 : keys.length - 1) : Math.min(keys.length - 1, Math.max(0, i + d));
    select(keys[i]);
  }

  document.addEventListener("keydown", (e) => {
    const t = e.target;
    const typing = t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT");
    if (e.key === "Escape" && typing) { t.blur(); return; }
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    switch (e.key) {
      case "j": move(1); break;
      case "k": move(-1); break;
      case "Enter": case "o": if (selected) toggle(selected); break;
      case "a": if (selected) allow(selected, false); break;
      case "r": if (selected) allow(selected, true); break;
      case "d": if (selected) deny(selected); break;
      case "/": e.preventDefault(); $("#f-session").focus(); break;
      default: return;
    }
    e.preventDefault();
  });
  $("#filters").addEventListener("input", applyFilters);
  $("#filters").addEventListener("submit", (e) => e.preventDefault());

  async function connect() {
    const status = $("#status");
    for (;;) {
      try {
        const res = await fetch("/api/events", { headers: { "X-Toolbus-Token": token } });
        if (res.status === 401) {
          sessionStorage.removeItem(KEY);
          return login(await res.text());
        }
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let end;
          while ((end = buf.indexOf("\n\n")) >= 0) {
            const lines = buf.slice(0, end).split("\n");
            buf = buf.slice(end + 2);
            const data = lines.find((l) => l.startsWith("data: "));
            if (lines[0] === "event: calls" && data) {
              status.textContent = "live"; status.className = "status live";
              render(JSON.parse(data.slice(6)));
            }
          }
        }
      } catch (_) { /* reconnects below */ }
      status.textContent = "reconnecting…"; status.className = "status down";
      await new Promise((ok) => setTimeout(ok, 1000));
    }
  }
  // login shows the form for the token with msg; submitted, it connects.
  function login(msg) {
    flash(msg, false);
    $("#status").textContent = "no token"; $("#status").className = "status down";
    $("#login").hidden = false;
    $("#token").focus();
  }
  $("#login").addEventListener("submit", (e) => {
    e.preventDefault();
    token = $("#token").value.trim();
    $("#token").value = "";
    $("#login").hidden = true;
    $("#flash").hidden = true;
    sessionStorage.setItem(KEY, token);
    connect();
  });
  // start exchanges the link's code for the token (once: the code is then
  // void), or goes on with the tab's token, or asks for it.
  async function start() {
    let msg = "give the inbox's token (the link the inbox printed opens one visit)";
    if (code) {
      try {
        const res = await fetch("/api/login", { method: "POST", headers: { "Content-Type": "application/json", "X-Toolbus-Code": code }, body: "{}" });
        if (res.ok) {
          token = (await res.json()).token;
          sessionStorage.setItem(KEY, token);
        } else msg = await res.text();
      } catch (e) {
        msg = "the inbox did not answer: " + e;
      }
    }
    if (!token) return login(msg);
    connect();
  }
  setInterval(tick, 1000);
  start();
  // For scripts and tests: the calls as the page holds them, and send.
  window.toolbusInbox = { calls: calls, send: send, select: select };
})();
