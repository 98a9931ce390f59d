/** An answer's parts (docs/protocol.md §2): text per run, tool cards by call_id, cards by
 * confirm_id. Pure functions on the model's items; the model decides when to call them. */

import type { AssistantItem, CardView, EventMeta, Item, Part, TextView, ToolView } from "./types.js";

export function newTool(m: EventMeta): ToolView {
  return {
    kind: "tool", callId: String(m.call_id), tool: String(m.tool ?? ""), title: String(m.title ?? m.tool ?? ""),
    status: "running", input: m.input ?? null, output: null, error: null, attempt: 0, maxAttempts: 0,
    timeoutSeconds: 0, retryable: false,
  };
}

/** The tool card of `m.call_id` (made here when the join started after its tool_start). */
export function upsertTool(item: AssistantItem, m: EventMeta, update: (t: ToolView) => void): void {
  const callId = String(m.call_id);
  let tool = item.parts.find((p): p is ToolView => p.kind === "tool" && p.callId === callId);
  if (!tool) {
    item.parts.push({ ...newTool(m), input: null });
    tool = item.parts[item.parts.length - 1] as ToolView; // the reactive proxy, not the literal
  }
  update(tool);
}

export function appendText(item: AssistantItem, runId: string | null, token: string): void {
  const last = item.parts[item.parts.length - 1];
  if (last?.kind === "text" && last.runId === runId) last.text += token;
  else item.parts.push({ kind: "text", runId, text: token });
}

/** The final message's `content` is the whole answer of its run: the text shown must end up
 * equal to it (a join that started late, a coalesced token never seen). */
export function finalText(item: AssistantItem, runId: string | null, content: string): void {
  const mine = item.parts.filter((p): p is TextView => p.kind === "text" && p.runId === runId);
  const shown = mine.map((p) => p.text).join("");
  if (shown === content) return;
  if (content.startsWith(shown)) {
    appendText(item, runId, content.slice(shown.length));
    return;
  }
  item.parts = item.parts.filter((p) => !(p.kind === "text" && p.runId === runId));
  item.parts.push({ kind: "text", runId, text: content });
}

function* cards(items: Item[]): Generator<CardView> {
  for (const it of items) {
    if (it.kind !== "assistant") continue;
    for (const p of it.parts) if (p.kind === "card") yield p;
  }
}

export function findCard(items: Item[], confirmId: string): CardView | null {
  for (const c of cards(items)) if (c.confirmId === confirmId) return c;
  return null;
}

export function pendingCards(items: Item[]): CardView[] {
  return [...cards(items)].filter((c) => c.status === "pending");
}

export function itemOf(items: Item[], part: Part): AssistantItem | null {
  for (const it of items) if (it.kind === "assistant" && it.parts.includes(part)) return it;
  return null;
}

/** Remove a turn that never reached the server: its assistant item and the user item before. */
export function dropTurn(items: Item[], item: AssistantItem): void {
  const i = items.indexOf(item);
  if (i < 0) return;
  const start = i > 0 && items[i - 1]!.kind === "user" ? i - 1 : i;
  items.splice(start, i - start + 1);
}
