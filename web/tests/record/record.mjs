// Drives the real stack (record.py starts it) with the real @gradio/client and writes what the
// panel sees: every message of each submit's iterator (data events deep-copied, as the client
// patches one object in place; the repeated last value kept, so the model's dedupe is tested),
// the REST answers the panel reads, and the Gradio config's examples.
import { Client } from "@gradio/client";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

const E = (k) => { const v = process.env[k]; if (!v) throw new Error(`${k} unset: run record.py`); return v; };
const OUT = E("OUT");
const AGENT = E("AGENT_URL");
const tok = { alice: E("TOKEN_ALICE"), carol: E("TOKEN_CAROL") };
const gradio = (base) => base + "/api/agent/gradio/";
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
mkdirSync(OUT, { recursive: true });

const connect = (user, base = AGENT) =>
  Client.connect(gradio(base), { headers: { Authorization: `Bearer ${tok[user]}` }, events: ["data", "status"] });

function keep(msg) {
  if (msg.type === "data") return { type: "data", data: structuredClone(msg.data) };
  if (msg.type === "status") return { type: "status", stage: msg.stage, ...(msg.message ? { message: msg.message } : {}) };
  return { type: msg.type };
}

// One submit: its messages until the stream's end (complete/error status), or until `until`
// says stop, in which case `onStop` may cancel.
async function run(client, payload, { until, onStop } = {}) {
  const sub = client.submit("/chat", payload);
  const messages = [];
  for await (const msg of sub) {
    messages.push(keep(msg));
    if (msg.type === "status" && (msg.stage === "complete" || msg.stage === "error")) break;
    if (until && msg.type === "data" && until(messages)) {
      if (onStop) await onStop(sub);
      break;
    }
  }
  return { payload, messages };
}
const events = (r) => r.messages.filter((m) => m.type === "data").map((m) => m.data[0]);
const lastEv = (r) => events(r).at(-1);
const conv = (r) => events(r)[0].metadata.conversation_id;
const msg = (text, extra = {}) => ({ text, files: [], tab_id: "tab-rec-1", ...extra });
const save = (name, description, submits, extra = {}) => {
  writeFileSync(join(OUT, `${name}.json`), JSON.stringify({ name, description, submits, ...extra }, null, 1) + "\n");
  console.log("recorded", name, submits.map((s) => s.messages.length));
};
async function rest(path, user = "alice", init = {}) {
  const r = await fetch(AGENT + path, { ...init, headers: { Authorization: `Bearer ${tok[user]}`, "content-type": "application/json" } });
  return { status: r.status, body: await r.json().catch(() => null) };
}
async function fault(operation, f) {
  const r = await fetch(E("SANDBOX_URL") + "/api/sandbox/faults", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ operation, ...f }) });
  if (!r.ok) throw new Error(`fault ${r.status}`);
}

const alice = await connect("alice");
let confirmConv = null;
let pendingConv = null;

// Gradio config: where the welcome chips come from.
const withExamples = alice.config.components.filter((c) => c.props && Array.isArray(c.props.examples));
writeFileSync(join(OUT, "gradio_config_examples.json"),
  JSON.stringify({ components: withExamples.map((c) => ({ id: c.id, type: c.type, props: { examples: c.props.examples } })) }, null, 1) + "\n");

const happy = await run(alice, { message: msg("привет") });
save("happy", "alice: «привет» → tokens, final", [happy]);

const tool = await run(alice, { message: msg("найди дашборды про энергопотребление") });
save("tool", "alice: a read tool, then the answer", [tool]);

{
  const first = await run(alice, { message: msg("задеплой дашборд 42 в прод") });
  const card = lastEv(first).metadata;
  const second = await run(alice, { message: msg("__resume__", { confirm_id: card.confirm_id }), action: "confirm", conversation_id: conv(first) });
  save("confirm", "alice: deploy to prod → card; confirm → resolved, tool, answer", [first, second]);
  confirmConv = conv(first);
}
{
  const first = await run(alice, { message: msg("задеплой дашборд 42 в ss-stage") });
  const card = lastEv(first).metadata;
  const second = await run(alice, { message: msg("__resume__", { confirm_id: card.confirm_id }), action: "deny", conversation_id: conv(first) });
  save("deny", "alice: deploy to ss-stage → card; deny → resolved denied, answer", [first, second]);
}
{
  const first = await run(alice, { message: msg("удали дашборд 9 в ss-dev") });
  const card = lastEv(first).metadata;
  const second = await run(alice, { message: msg("__resume__", { confirm_id: card.confirm_id }), action: "deny", conversation_id: conv(first) });
  save("dangerous", "alice: delete → a dangerous card; deny", [first, second]);
}
{
  const carol = await connect("carol");
  const first = await run(carol, { message: msg("задеплой дашборд 42 в прод") });
  const card = lastEv(first).metadata;
  const second = await run(carol, { message: msg("__resume__", { confirm_id: card.confirm_id }), action: "deny", conversation_id: conv(first) });
  save("permission_denied", "carol: deploy to prod → permission-denied card; Close (deny) → the alternatives", [first, second]);
}
{
  const first = await run(alice, { message: msg("задеплой дашборд 42 в прод") });
  const second = await run(alice, { message: msg("привет"), conversation_id: conv(first) });
  const third = await run(alice, { message: msg("удали дашборд 10 в ss-dev"), conversation_id: conv(first) });
  pendingConv = conv(first);
  save("new_message_while_card", "a new message while a card is pending: resolved denied first", [first, second]);
}
{
  await fault("list_environments", { status: 502, times: 2 });
  const first = await run(alice, { message: msg("Какие окружения есть?") });
  save("retry_exhausted", "a transient tool failure retried once, then exhausted; the turn goes on", [first]);
}
{
  await fault("search_dashboards", { status: 500 });
  const first = await run(alice, { message: msg("найди дашборды про продажи в ss-dev") });
  save("tool_failure", "a tool failure, not retried", [first]);
}
{
  const timing = await connect("alice", E("TIMEOUT_URL"));
  await fault("superset_explore_database", { delay_s: 3 });
  const first = await run(timing, { message: msg("исследуй базу 2 в ss-dev") });
  const second = await run(timing, { message: msg("__retry__"), action: "retry", conversation_id: conv(first) });
  save("tool_timeout", "a tool timeout (🔄), then action retry re-runs the turn", [first, second]);
}
{
  const dead = await connect("alice", E("DEAD_URL"));
  const first = await run(dead, { message: msg("привет") });
  const second = await run(alice, { message: msg("__retry__"), action: "retry", conversation_id: conv(first) });
  save("llm_error", "the model is down: error LLM_UNAVAILABLE; Retry (on a healthy replica) completes the turn", [first, second]);
}
{
  const short = await connect("alice", E("SHORT_URL"));
  const first = await run(short, { message: msg("задеплой дашборд 42 в прод") });
  const card = lastEv(first).metadata;
  await sleep(2600);
  const second = await run(short, { message: msg("__resume__", { confirm_id: card.confirm_id }), action: "confirm", conversation_id: conv(first) });
  const third = await run(short, { message: msg("__retry__"), action: "retry", conversation_id: conv(first) });
  save("expired", "a card that expired (2 s TTL): confirm → resolved expired; «Повторить запрос?» (retry) → a new card", [first, second, third]);
}
{
  const slow = await connect("alice", E("SLOW_URL"));
  const first = await run(slow, { message: msg("привет and echo 60 words") },
    { until: (m) => m.filter((x) => x.type === "data").length >= 4, onStop: (sub) => sub.cancel() });
  await sleep(1500);
  const hist = await rest(`/api/assistant/history?conversation_id=${conv(first)}&limit=50`);
  save("cancel", "Stop after 4 events: submission.cancel(); the partial answer is kept", [first], { history: hist });
}
{
  // A tab that stops reading (as a dropped connection) and a join from a new client.
  const slow = await connect("alice", E("SLOW_URL"));
  const sub = slow.submit("/chat", { message: msg("привет and echo 80 words") });
  const before = [];
  const it = sub[Symbol.asyncIterator]();
  while (before.filter((x) => x.type === "data").length < 4) before.push(keep((await it.next()).value));
  const last = before.filter((x) => x.type === "data").at(-1).data[0].metadata;
  const active = await rest(`/api/agent/conversations/${last.conversation_id}/active`);
  // A second tab (another tab_id) is gated meanwhile.
  const busy = await run(await connect("alice", E("SLOW_URL")), { message: { text: "ещё", files: [], tab_id: "tab-rec-2" }, conversation_id: last.conversation_id });
  const joiner = await connect("alice");
  const joined = await run(joiner, { message: msg("", { run_id: last.run_id, last_seq: last.seq }), action: "join", conversation_id: last.conversation_id });
  (async () => { for (;;) { const n = await it.next(); if (n.done || n.value?.stage === "complete") break; } })().catch(() => {});
  save("join", "a run followed for 4 events, then joined from a new client with run_id and last_seq", [{ payload: { message: msg("привет and echo 80 words") }, messages: before }, joined], { active });
  save("busy", "a second tab sends in a conversation whose run is live: CONVERSATION_BUSY", [busy], { active });
  const noRun = await run(alice, { message: msg("", { last_seq: 0 }), action: "join", conversation_id: conv(happy).replace(/.$/, "0") });
  save("join_not_found", "a join of an unknown conversation", [noRun]);
}

// REST the panel reads.
const list = await rest("/api/assistant/conversations?limit=20");
const search = await rest("/api/assistant/conversations?limit=20&q=" + encodeURIComponent("энергопотребление"));
const history = await rest(`/api/assistant/history?conversation_id=${conv(tool)}&limit=50`);
const confirmHistory = await rest(`/api/assistant/history?conversation_id=${confirmConv}&limit=50`);
const pendingHistory = await rest(`/api/assistant/history?conversation_id=${pendingConv}&limit=50`);
const del = await rest(`/api/assistant/conversations/${conv(happy)}`, "alice", { method: "DELETE" });
const afterDel = await rest("/api/assistant/conversations?limit=20");
const restore = await rest(`/api/assistant/conversations/${conv(happy)}/restore`, "alice", { method: "POST" });
const missing = await rest(`/api/assistant/history?conversation_id=nope-nope&limit=50`);
const idle = await rest(`/api/agent/conversations/${conv(happy)}/active`);
writeFileSync(join(OUT, "rest.json"), JSON.stringify({ list, search, history, confirmHistory, pendingHistory, del, afterDel, restore, missing, idle }, null, 1) + "\n");
console.log("recorded rest");
process.exit(0);
