/** Branches (docs/protocol.md §4, "Branches"; issue 35): edit a stored user message, regenerate
 * a stored answer, switch to another version with the picker.
 *
 *   edit()/regenerate() ─▶ fork(): the items cut where the branch starts ─▶ run(…, "fork")
 *     ─▶ its final reloads history (stream.ts), which shows the new branch with its siblings
 *     ─▶ refused before a run: the items as they were (`Inner.beforeFork`, stream.ts)
 *   switchBranch() ─▶ POST …/branch ─▶ history reloaded
 */

import type { ChatModel } from "./chat.svelte.js";
import { type Inner, deadline, HANG_MS, localId, newAssistant, payload } from "./machine.js";
import { run } from "./stream.js";
import { RestError } from "./types.js";

/** The new text runs on a new branch from just before the user message `messageId`. */
export function edit(m: ChatModel, k: Inner, messageId: string, text: string): void {
  const t = text.trim();
  const at = m.items.findIndex((i) => i.id === messageId && i.kind === "user");
  if (!t || at < 0) return;
  fork(m, k, at, t, "edit", messageId);
}

/** The user message before the answer `messageId` runs again on a new branch. */
export function regenerate(m: ChatModel, k: Inner, messageId: string): void {
  let at = m.items.findIndex((i) => i.id === messageId && i.kind === "assistant");
  while (at > 0 && m.items[at]?.kind !== "user") at--;
  const user = m.items[at];
  if (at < 0 || user?.kind !== "user") return;
  fork(m, k, at, user.text, "regenerate", messageId);
}

function fork(m: ChatModel, k: Inner, at: number, text: string, action: "edit" | "regenerate", messageId: string): void {
  if (!m.canSend || !m.conversationId) return;
  k.beforeFork = [...m.items];
  m.items = m.items.slice(0, at);
  m.items.push({ kind: "user", id: localId("u"), text });
  const item = newAssistant(m);
  const p = payload(m, k, action === "edit" ? text : "", action);
  p.message.message_id = messageId;
  void run(m, k, p, item, "fork", text);
}

/** The picker: the branch through `messageId` becomes the active one, and is shown. */
export async function switchBranch(m: ChatModel, k: Inner, messageId: string | undefined): Promise<void> {
  const cid = m.conversationId;
  if (!cid || !messageId || !m.canSend) return;
  try {
    await deadline(k.o.rest.branch(cid, messageId, k.o.tabId), HANG_MS);
  } catch (e) {
    const code = e instanceof RestError ? e.code : "INTERNAL";
    m.error = { kind: "not_sent", code, text: e instanceof RestError ? e.detail || code : String(e), retryable: false };
    return;
  }
  await m.openConversation(cid);
}
