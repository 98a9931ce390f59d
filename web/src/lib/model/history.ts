/** REST history (agent/README_rest.md, "History") as the items the panel renders. */

import { cardFrom } from "./cards.js";
import type { CardStatus, HistoryMessage, Item, Part, ToolStatus } from "./types.js";

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
