// Helpers for driving /chat with the real @gradio/client, as the ss-tools frontend does.
import { Client } from "@gradio/client";

export const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through pytest (tests/agent/test_js_client.py)`);
  return v;
};

export async function connect(token, url = env("GRADIO_URL")) {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  return Client.connect(url, { headers, events: ["data", "status"] });
}

// Collect one submit's events. The client mutates one object in place, so every event is
// copied deeply; Gradio delivers the last value twice, so repeats of a seq are dropped.
export async function collect(sub, { onEvent } = {}) {
  const events = [];
  let seen = 0;
  for await (const msg of sub) {
    if (msg.type === "data") {
      const ev = structuredClone(msg.data[0]);
      if (ev.metadata.seq <= seen) continue;
      seen = ev.metadata.seq;
      events.push(ev);
      if (onEvent && (await onEvent(ev, events)) === "stop") break;
    } else if (msg.type === "status" && (msg.stage === "complete" || msg.stage === "error")) {
      break;
    }
  }
  return events;
}

export async function chat(client, payload, opts) {
  return collect(client.submit("/chat", payload), opts);
}

export const types = (events) => events.map((e) => e.metadata.type ?? "final");
export const last = (events) => events[events.length - 1];
export const final = (events) => events.find((e) => e.metadata.message_id);
export const tokens = (events) =>
  events.filter((e) => e.metadata.type === "stream_token").map((e) => e.metadata.token).join("");

export async function sandbox(path, body) {
  const resp = await fetch(env("SANDBOX_URL") + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!resp.ok) throw new Error(`${path}: ${resp.status}`);
  return resp.json();
}

export async function rest(path, token, init = {}) {
  const resp = await fetch(env("AGENT_URL") + path, {
    ...init,
    headers: { Authorization: `Bearer ${token}`, "content-type": "application/json",
               ...(init.headers ?? {}) },
  });
  return { status: resp.status, body: await resp.json().catch(() => null) };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The sandbox's audit, read with a service token from its own endpoint (as ss-tools would).
export async function audit(filters = {}) {
  const tok = await fetch(env("SANDBOX_URL") + "/api/auth/service-token", {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ client_id: "agentchat-agent", client_secret: env("SANDBOX_CLIENT_SECRET") }),
  }).then((r) => r.json());
  const qs = new URLSearchParams(filters).toString();
  const resp = await fetch(env("SANDBOX_URL") + "/api/audit?" + qs, {
    headers: { Authorization: `Bearer ${tok.access_token}`, "X-User-JWT": env("TOKEN_ALICE") },
  });
  if (!resp.ok) throw new Error(`audit: ${resp.status}`);
  return (await resp.json()).items;
}

export const card = (events) => events.find((e) => e.metadata.type === "confirm_required");
export const resolved = (events) => events.find((e) => e.metadata.type === "confirm_resolved");
export const cid = (events) => events[0].metadata.conversation_id;
