// The benchmarks' client: the real @gradio/client (from tests/js/node_modules, `make js`), as
// the ss-tools frontend uses it. Driven by bench/*.py through BENCH_SPEC (JSON); prints one
// JSON object on its last line. Times are milliseconds from each submit (performance.now()).
//
// mode "streams": `n` clients (one per conversation, like n browser tabs) each submit
//   `message` at once, `rounds` times; per stream: time of the first text, every event, the
//   end, and whether any event was lost or duplicated (judged by seq for the agent, by the
//   text's growth for the bare baseline, and by the final text against `expect`).
// mode "confirm": per repeat, a turn that raises a card, its confirm, then a plain new turn
//   in the same conversation; the time to the first event of each.
import { pathToFileURL } from "node:url";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { boundaries, firstMarks, mark } from "./measure.mjs";

// Every byte of the servers' event streams (Gradio's /queue/data, where a submit's events come),
// counted as they arrive: bytes per token event, on the wire, as bench/js/langgraph.mjs counts
// the peer's.
let streamBytes = 0;
const realFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
  const res = await realFetch(input, init);
  if (!res.body || !String(input?.url ?? input).includes("/queue/data")) return res;
  const counted = res.body.pipeThrough(new TransformStream({
    transform(chunk, out) { streamBytes += chunk.byteLength; out.enqueue(chunk); } }));
  return new Response(counted, { status: res.status, statusText: res.statusText,
                                 headers: res.headers });
};

const here = dirname(fileURLToPath(import.meta.url));
const entry = join(here, "..", "..", "tests", "js", "node_modules", "@gradio", "client", "dist",
                   "index.js");
const { Client } = await import(pathToFileURL(entry).href);

const spec = JSON.parse(process.env.BENCH_SPEC);
const now = () => performance.now();

// spec.tokens: one token per client (client i takes tokens[i % length], as many users' tabs
// would); else spec.token for every client.
let connected = 0;
async function connect() {
  const token = spec.tokens?.length ? spec.tokens[connected++ % spec.tokens.length] : spec.token;
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  return Client.connect(spec.url, { headers, events: ["data", "status"] });
}


function contentOf(data) {
  const v = data?.[0];
  if (typeof v === "string") return { content: v, meta: {} };
  return { content: String(v?.content ?? ""), meta: v?.metadata ?? {} };
}

// spec.mark_first: marks on stderr for bench/agent_scale.py --profile-start: `connected` once
// every client is connected (then `start_delay_ms` for a profiler to attach), `submit` just
// before the first round's submits, `half-first` and `all-first` once half and all of its
// streams have their first text (with the time since the submits, ms).
const { firstSeen, submit } = firstMarks(spec);

// One submit, read the way lib.mjs collect() does, without copying each event (the client
// mutates one object in place, so every field is read before the next await).
async function stream(client, payload, { agent, expect, bounds }) {
  const t0 = now();
  const r = { first: null, end: null, times: [], types: [], events: 0, repeats: 0, lost: 0,
              dup: 0, final_ok: false, error: null, conversation_id: null, tokens: 0,
              token_events: 0 };
  let seen = 0;          // agent: last seq
  let tokensSeen = 0;    // bare: tokens in the text so far
  let joined = "";
  let final = null;
  let lastContent = null;
  for await (const msg of client.submit("/chat", payload)) {
    if (msg.type === "status") {
      if (msg.stage === "complete" || msg.stage === "error") {
        if (msg.stage === "error") r.error ??= msg.message ?? "error";
        break;
      }
      continue;
    }
    if (msg.type !== "data") continue;
    const t = now() - t0;
    const { content, meta } = contentOf(msg.data);
    if (agent) {
      const seq = meta.seq;
      if (seq === seen) { r.repeats++; continue; }  // Gradio delivers the last value twice
      if (seq < seen) { r.dup++; continue; }
      if (seq > seen + 1) r.lost += seq - seen - 1;
      seen = seq;
      r.conversation_id ??= meta.conversation_id;
      const kind = meta.type ?? "final";
      r.types.push(kind);
      if (kind === "stream_token") {
        r.token_events++;
        joined += meta.token;
        if (r.first === null) firstSeen();
        r.first ??= t;
      } else if (kind === "final") {
        final = content;
      } else if (kind === "error") {
        r.error = `${meta.code}: ${meta.detail}`;
      }
    } else {
      if (content === lastContent) { r.repeats++; continue; }
      lastContent = content;
      const k = bounds.get(content.length);
      if (k === undefined || !expect.startsWith(content)) { r.error = "unexpected text"; continue; }
      if (k <= tokensSeen) r.dup++;
      else if (k > tokensSeen + 1) r.lost += k - tokensSeen - 1;
      tokensSeen = Math.max(tokensSeen, k);
      if (r.first === null) firstSeen();
      r.first ??= t;
      r.token_events++;
      joined = content;
      final = content;
    }
    r.events++;
    r.times.push(Math.round(t * 10) / 10);
  }
  r.end = now() - t0;
  r.tokens = bounds.get((final ?? "").length) ?? 0;
  r.final_ok = final !== null && final === expect && joined === final;
  // A stream that simply stopped short lost the rest of its tokens.
  if (!agent && final !== null && final !== expect) r.lost += bounds.get(expect.length) - tokensSeen;
  return r;
}

async function streams() {
  const bounds = boundaries(spec.expect);
  const clients = [];
  for (let i = 0; i < spec.n; i += 20) {
    const batch = Math.min(20, spec.n - i);
    clients.push(...(await Promise.all(Array.from({ length: batch }, connect))));
  }
  if (spec.mark_first) {
    mark("connected");
    await new Promise((resolve) => setTimeout(resolve, spec.start_delay_ms ?? 1500));
    submit();
  }
  const rounds = [];
  for (let round = 0; round < (spec.rounds ?? 1); round++) {
    const start = now();
    const cpu0 = process.cpuUsage();
    streamBytes = 0;
    const results = await Promise.all(clients.map(async (c) => {
      const offset = now() - start;
      const r = await stream(c, { message: spec.message },
                             { agent: spec.agent, expect: spec.expect, bounds });
      r.offset = offset;
      return r;
    }));
    const cpu = process.cpuUsage(cpu0);
    rounds.push({ wall_ms: now() - start, cpu_ms: (cpu.user + cpu.system) / 1000,
                  bytes: streamBytes, streams: results });
  }
  return { mode: "streams", rounds };
}

// The first event of a submit, and of the one after it; the stream is read to its end.
async function timed(client, payload) {
  const t0 = now();
  const times = [];
  const types = [];
  let seen = 0;
  let meta = {};
  for await (const msg of client.submit("/chat", payload)) {
    if (msg.type === "status" && (msg.stage === "complete" || msg.stage === "error")) break;
    if (msg.type !== "data") continue;
    const t = now() - t0;
    const m = msg.data[0].metadata;
    if (m.seq <= seen) continue;
    seen = m.seq;
    times.push(t);
    types.push(m.type ?? "final");
    if (m.type === "confirm_required" || m.type === "error" || m.message_id) meta = { ...m };
  }
  return { first: times[0] ?? null, second: times[1] ?? null, end: now() - t0, types, meta };
}

async function confirm() {
  const client = await connect();
  const out = [];
  const errors = [];
  for (let i = 0; i < spec.repeats; i++) {
    const card = await timed(client, { message: spec.card_message });
    if (card.meta.type !== "confirm_required") {
      throw new Error(`no card: ${JSON.stringify(card.types)} ${JSON.stringify(card.meta)}`);
    }
    const cid = card.meta.conversation_id;
    const conf = await timed(client, { message: { text: "__resume__" }, action: "confirm",
                                       conversation_id: cid });
    const plain = await timed(client, { message: spec.plain_message, conversation_id: cid });
    if (conf.types[0] !== "confirm_resolved" || !conf.meta.message_id || !plain.meta.message_id) {
      errors.push([conf.types, plain.types, plain.meta.code ?? null, plain.meta.detail ?? null]);
      continue;
    }
    out.push({ card_first: card.first, confirm_first: conf.first, confirm_second: conf.second,
               confirm_end: conf.end, plain_first: plain.first, plain_end: plain.end });
  }
  return { mode: "confirm", repeats: out, errors };
}

const result = spec.mode === "confirm" ? await confirm() : await streams();
// Exit only once the output is flushed: a pipe takes 64 KB before a write goes async.
process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(0));
