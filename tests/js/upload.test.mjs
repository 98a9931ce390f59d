// Files through the real @gradio/client: handle_file uploads with the forwarded token, and the
// file's text reaches the model (the stored user message carries it).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { handle_file } from "@gradio/client";
import { chat, connect, env, final, last, rest } from "./lib.mjs";

const alice = env("TOKEN_ALICE");

function note(text) {
  const path = join(mkdtempSync(join(tmpdir(), "agentchat-upload-")), "note.txt");
  writeFileSync(path, text);
  return path;
}

test("an uploaded .txt reaches the model as text", async () => {
  const marker = `маркер-${Date.now()}-${Math.random().toString(36).slice(2)}`;
  const client = await connect(alice);
  const events = await chat(client, [{ text: "прочитай файл",
                                       files: [handle_file(note(`строка файла ${marker}\n`))] }]);
  const fin = final(events);
  assert.ok(fin, JSON.stringify(last(events)?.metadata));
  const cid = fin.metadata.conversation_id;
  const { status, body } = await rest(`/api/assistant/history?conversation_id=${cid}`, alice);
  assert.equal(status, 200);
  const user = body.items.find((m) => m.role === "user");
  assert.ok(user.content.includes(`[file note.txt]\nстрока файла ${marker}`), user.content);
});

test("without a token the upload is refused and nothing is stored", async () => {
  const client = await connect(null);
  let refused = false;
  try {
    const events = await chat(client, [{ text: "прочитай файл",
                                         files: [handle_file(note("secret words\n"))] }]);
    refused = events.length === 0 || last(events).metadata.type === "error";
  } catch (e) {
    refused = /401|UNAUTHORIZED|upload/i.test(String(e?.message ?? e));
  }
  assert.ok(refused, "an upload without a token never reaches a turn");
});
