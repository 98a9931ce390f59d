/** A card from a `confirm_required` event (docs/protocol.md §2–§3) or a history record. */

import type { CardCall, CardView } from "./types.js";

/** A batched card's `calls` (several calls of one model message on one card). */
function callsOf(raw: unknown): CardCall[] {
  if (!Array.isArray(raw) || raw.length < 2) return [];
  return raw.filter((c): c is Record<string, unknown> => !!c && typeof c === "object")
    .map((c) => ({
      callId: String(c.call_id ?? ""),
      title: String(c.title ?? ""),
      prompt: String(c.prompt ?? ""),
      risk: String(c.risk ?? ""),
      env: String(c.env_context ?? ""),
      checked: typeof c.result === "string" ? c.result === "confirmed" : true,
    }));
}

/** A `confirm_required` event's card. */
export function cardFrom(m: Record<string, unknown>, content: string, receivedAt: number, armMs: number): CardView {
  const dangerous = m.dangerous === true;
  const exp = Date.parse(String(m.expires_at ?? ""));
  const a = m.approval as { approvers?: unknown; quorum?: unknown; approve_url?: unknown } | null;
  return {
    kind: "card",
    confirmId: String(m.confirm_id),
    title: String(m.title ?? ""),
    prompt: String(m.prompt ?? content ?? ""),
    risk: String(m.risk ?? ""),
    riskLevel: String(m.risk_level ?? ""),
    dangerous,
    env: String(m.env_context ?? ""),
    permissionGranted: m.permission_granted !== false,
    requiredRole: typeof m.required_role === "string" ? m.required_role : null,
    reason: typeof m.reason === "string" && m.reason ? m.reason : null,
    alternatives: Array.isArray(m.alternatives)
      ? m.alternatives.filter((a): a is { action: string; prompt: string } =>
          typeof (a as { prompt?: unknown })?.prompt === "string")
        .map((a) => ({ action: String(a.action ?? ""), prompt: a.prompt }))
      : [],
    approval: a && typeof a === "object"
      ? { approvers: Array.isArray(a.approvers) ? a.approvers.map(String) : [],
          quorum: Number(a.quorum ?? 1), approveUrl: String(a.approve_url ?? "") }
      : null,
    calls: callsOf(m.calls),
    expiresAt: Number.isFinite(exp) ? exp : receivedAt + 300_000,
    armedAt: dangerous ? receivedAt + armMs : receivedAt,
    status: "pending",
    answering: false,
  };
}
