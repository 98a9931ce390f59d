// Rejoining a run (docs/protocol.md §4, "Runs") with the real @gradio/client: a tab whose
// process is killed (SIGKILL) mid-answer; a new client joins with the run_id and last seq the
// dead one printed, on the same replica and on another; the joined text completes the answer
// exactly (no gap, no repeat) and equals the final message in history.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { chat, connect, env, last, rest } from "./lib.mjs";

const alice = env("TOKEN_ALICE");
const SLOW = env("SLOW_GRADIO_URL");  // paced like a real model

// Run the child until it has printed `n` events, then SIGKILL it; its events.
async function dieAfter(url, text, n) {
  const child = spawn(process.execPath, ["rejoin_child.mjs", url, alice, text],
                      { cwd: import.meta.dirname, env: process.env });
  const seen = [];
  const lines = createInterface({ input: child.stdout });
  for await (const line of lines) {
    seen.push(JSON.parse(line));
    if (seen.length >= n) break;
  }
  child.kill("SIGKILL");
  await new Promise((r) => child.once("exit", r));
  return seen;
}

for (const [where, joinUrl] of [["the same replica", SLOW], ["another replica", env("GRADIO_URL")]]) {
  test(`a killed tab's run is rejoined on ${where}: nothing lost, nothing repeated`, async () => {
    const before = await dieAfter(SLOW, "привет and echo 120 words", 4);
    assert.deepEqual(before.map((e) => e.metadata.seq), [1, 2, 3, 4]);
    const { run_id: runId, conversation_id: cid, seq } = last(before).metadata;
    assert.ok(runId && cid);
    assert.ok(before.every((e) => e.metadata.run_id === runId));

    const client = await connect(alice, joinUrl);
    const joined = await chat(client, {
      message: { text: "", files: [], action: "join", conversation_id: cid, run_id: runId,
                 last_seq: seq },
    });
    assert.ok(joined.length > 0, "the run went on after the tab died");
    joined.forEach((e, i) => {
      assert.equal(e.metadata.seq, seq + 1 + i, "seq goes on from the last one seen");
      assert.equal(e.metadata.run_id, runId);
    });
    const fin = last(joined);
    assert.ok(fin.metadata.message_id, "the join follows the run to its final message");
    // Each stream_token's content is the whole answer so far: the joined stream extends
    // what the dead tab showed, and the final text is exactly the stored one.
    const seen = last(before).content;
    for (const e of joined) assert.ok(e.content.startsWith(seen), "no gap, no repeat");
    const tokensAfter = joined.filter((e) => e.metadata.type === "stream_token")
      .map((e) => e.metadata.token).join("");
    const tokensBefore = before.filter((e) => e.metadata.type === "stream_token")
      .map((e) => e.metadata.token).join("");
    assert.equal(tokensBefore + tokensAfter, fin.content, "the tokens add up to the answer");
    const history = await rest(`/api/assistant/history?conversation_id=${cid}&limit=100`, alice);
    assert.equal(history.status, 200);
    const answers = history.body.items.filter((m) => m.role === "assistant");
    assert.equal(answers[answers.length - 1].content, fin.content);
  });
}
