// The peer's client for bench/agent_scale.py --peer langgraph: LangGraph Agent Server's HTTP API
// read as raw server-sent events with Node's fetch, under the same BENCH_SPEC and with the same
// per-stream record as client.mjs's `streams` mode, so bench/agent_scale.py measures both alike.
// One stream per conversation: POST /threads/{new id}/runs/stream with `if_not_exists: "create"`
// (the thread and its run in one request, as the agent's first submit makes its conversation),
// stream_mode `messages-tuple` (what LangGraph's useStream reads: one event per model token).
// Every stream's connection is opened (GET /ok) before the submits, as @gradio/client's
// connect() opens the agent's. Bytes: every byte of each run's response body.
import { randomUUID } from "node:crypto";
import { boundaries, firstMarks, mark } from "./measure.mjs";

const spec = JSON.parse(process.env.BENCH_SPEC);
const now = () => performance.now();


const { firstSeen, submit } = firstMarks(spec);

// One run: lost or duplicated judged by the joined text against `expect` token by token (the
// events carry no sequence number).
async function stream(expect, bounds) {
  const t0 = now();
  const r = { first: null, end: null, times: [], types: [], events: 0, repeats: 0, lost: 0,
              dup: 0, final_ok: false, error: null, conversation_id: randomUUID(), tokens: 0,
              bytes: 0, token_events: 0 };
  let joined = "";
  let last = "";
  const body = { assistant_id: spec.assistant ?? "echo", if_not_exists: "create",
                 input: { messages: [{ role: "human", content: spec.message }] },
                 stream_mode: ["messages-tuple"] };
  try {
    const res = await fetch(`${spec.url}/threads/${r.conversation_id}/runs/stream`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const decoder = new TextDecoder();
    let buf = "";
    for await (const chunk of res.body) {
      r.bytes += chunk.byteLength;
      buf += decoder.decode(chunk, { stream: true }).replaceAll("\r\n", "\n");
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        let event = "message";
        let data = "";
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        const t = now() - t0;
        if (event === "error") { r.error = data.slice(0, 200); continue; }
        if (event !== "messages") continue;
        const [msg] = JSON.parse(data);
        const content = typeof msg?.content === "string" ? msg.content : "";
        if (!content) continue;
        r.events++;
        r.token_events++;
        r.types.push("stream_token");
        r.times.push(Math.round(t * 10) / 10);
        if (r.first === null) { r.first = t; firstSeen(); }
        if (expect.startsWith(joined + content)) { joined += content; last = content; }
        else if (content === last) r.dup++;
        else r.error ??= "unexpected text";
      }
    }
  } catch (e) {
    r.error ??= String(e?.message ?? e);
  }
  r.end = now() - t0;
  r.tokens = bounds.get(joined.length) ?? 0;
  r.final_ok = joined === expect;
  if (!r.final_ok) r.lost += (bounds.get(expect.length) ?? 0) - r.tokens;
  return r;
}

async function streams() {
  const bounds = boundaries(spec.expect);
  await Promise.all(Array.from({ length: spec.n }, async () => (await fetch(`${spec.url}/ok`)).text()));
  if (spec.mark_first) {
    mark("connected");
    await new Promise((resolve) => setTimeout(resolve, spec.start_delay_ms ?? 1500));
    await Promise.all(Array.from({ length: spec.n }, async () => (await fetch(`${spec.url}/ok`)).text()));
    submit();
  }
  const rounds = [];
  for (let round = 0; round < (spec.rounds ?? 1); round++) {
    const start = now();
    const cpu0 = process.cpuUsage();
    const results = await Promise.all(Array.from({ length: spec.n }, async () => {
      const offset = now() - start;
      const r = await stream(spec.expect, bounds);
      r.offset = offset;
      return r;
    }));
    const cpu = process.cpuUsage(cpu0);
    rounds.push({ wall_ms: now() - start, cpu_ms: (cpu.user + cpu.system) / 1000,
                  bytes: results.reduce((sum, r) => sum + r.bytes, 0), streams: results });
  }
  return { mode: "streams", rounds };
}

const result = await streams();
process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(0));
