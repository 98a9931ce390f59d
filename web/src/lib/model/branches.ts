/** Branches (docs/protocol.md §4, "Branches"): edit a stored user message, regenerate
 * a stored answer, switch to another version with the picker.
 *
 *   edit()/regenerate() ─▶ fork(): the items cut where the branch starts ─▶ run(…, "fork")
 *     ─▶ its final reloads history (stream.ts), which shows the new branch with its siblings
 *     ─▶ refused before a run: the items as they were (`Inner.beforeFork`, stream.ts)
 *   switchBranch() ─▶ POST …/branch ─▶ history reloaded
 */

import { type ChatState, type Inner, deadline, HANG_MS, localId, newAssistant, payload } from "./machine.js";
import { run } from "./stream.js";
import { RestError } from "./types.js";

/** The new text runs on a new branch from just before the user message `messageId`. */
export function edit(model: ChatState, inner: Inner, messageId: string, text: string): void {
  const t = text.trim();
  const at = model.items.findIndex((i) => i.id === messageId && i.kind === "user");
  if (!t || at < 0) return;
  fork(model, inner, at, t, "edit", messageId);
}

/** The user message before the answer `messageId` runs again on a new branch. */
export function regenerate(model: ChatState, inner: Inner, messageId: string): void {
  let at = model.items.findIndex((i) => i.id === messageId && i.kind === "assistant");
  while (at > 0 && model.items[at]?.kind !== "user") at--;
  const user = model.items[at];
  if (at < 0 || user?.kind !== "user") return;
  fork(model, inner, at, user.text, "regenerate", messageId);
}

function fork(model: ChatState, inner: Inner, at: number, text: string, action: "edit" | "regenerate", messageId: string): void {
  if (!model.canSend || !model.conversationId) return;
  inner.beforeFork = [...model.items];
  model.items = model.items.slice(0, at);
  model.items.push({ kind: "user", id: localId("u"), text });
  const item = newAssistant(model);
  const p = payload(model, inner, action === "edit" ? text : "", action);
  p.message.message_id = messageId;
  void run(model, inner, p, item, "fork", text);
}

/** The picker: the branch through `messageId` becomes the active one, and is shown. */
export async function switchBranch(model: ChatState, inner: Inner, messageId: string | undefined): Promise<void> {
  const cid = model.conversationId;
  if (!cid || !messageId || !model.canSend) return;
  try {
    await deadline(inner.options.rest.branch(cid, messageId, inner.options.tabId), HANG_MS);
  } catch (e) {
    const code = e instanceof RestError ? e.code : "INTERNAL";
    model.error = { kind: "not_sent", code, text: e instanceof RestError ? e.detail || code : String(e), retryable: false };
    return;
  }
  await inner.openConversation(cid);
}
