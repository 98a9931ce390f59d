/** REST history (agent/README_rest.md, "History") as the items the panel renders. */

import { cardFrom } from "./cards.js";
import type { CardStatus, HistoryMessage, Item, Part, ToolStatus, UserItem } from "./types.js";

const OUTCOME: Record<string, ToolStatus> = { ok: "done", running: "running", timeout: "timeout" };
const STATUS: Record<string, CardStatus> = { confirmed: "confirmed", denied: "denied", expired: "expired", pending: "pending" };

export function fromHistory(messages: HistoryMessage[], now: number, armMs: number): Item[] {
  const items: Item[] = [];
  for (const m of messages) {
    if (m.role === "user") {
      items.push({ kind: "user", id: m.id, text: m.content, stored: true, siblings: m.siblings ?? null });
      continue;
    }
    const parts: Part[] = [];
    for (const t of m.tool_calls ?? []) {
      parts.push({
        kind: "tool", callId: t.call_id, tool: t.tool, title: t.title ?? t.tool,
        status: OUTCOME[t.outcome] ?? "error", input: t.input ?? null, output: t.output ?? null,
        error: t.error, attempt: 0, maxAttempts: 0, timeoutSeconds: 0, retryable: false,
      });
    }
    for (const c of m.confirmations ?? []) {
      const card = cardFrom({ ...c.card, confirm_id: c.confirm_id }, "", now, armMs);
      card.status = STATUS[c.status] ?? "denied";
      parts.push(card);
    }
    if (m.content) parts.push({ kind: "text", runId: null, text: m.content });
    items.push({ kind: "assistant", id: m.id, parts, partial: m.partial, stored: true });
  }
  return items;
}

/** History's ids, `stored` and `siblings` onto the items a turn of this view added (docs/protocol.md §4:
 * the edit, regenerate and picker buttons need them), in place, so nothing re-renders but the
 * buttons. Matched from the end: the same kind, a user item the same text, an item already
 * stored the same id; the first pair that does not line up ends it (a turn stopped before any
 * text shows an answer history never stored), and what is before it stays as it is. `answerId`
 * (the final event's `message_id`) must be history's newest message, or the page is older than
 * the turn and nothing is adopted. Returns how many items were matched. */
export function adoptStored(shown: Item[], stored: HistoryMessage[], answerId: string): number {
  if (stored.at(-1)?.id !== answerId) return 0;
  const ids = new Set(shown.map((i) => i.id));
  let n = 0;
  for (let i = shown.length - 1, j = stored.length - 1; i >= 0 && j >= 0; i--, j--) {
    const it = shown[i]!;
    const m = stored[j]!;
    const same = it.kind === (m.role === "user" ? "user" : "assistant")
      && (it.kind !== "user" || sameText(it, m.content))
      && (it.stored ? it.id === m.id : !ids.has(m.id)); // an id is on one item only
    if (!same) break;
    n += 1;
  }
  for (let i = shown.length - n, j = stored.length - n; i < shown.length; i++, j++) {
    const it = shown[i]!;
    const m = stored[j]!;
    it.id = m.id;
    it.stored = true;
    if (it.kind === "user") it.siblings = m.siblings ?? null;
  }
  return n;
}

/** History keeps a message's attached files' text after its own (agent/chat/turn_starts.py). */
function sameText(it: UserItem, content: string): boolean {
  return it.text === content || !!it.files?.length && content.startsWith(it.text);
}
