/** Which view the page shows, from its own path (docs/protocol.md §11, §12): the chat at the page's
 * root, the approvals inbox at `approvals/`, one approval at `approvals/{id}` (a card's
 * `approve_url`), one MCP client's call at `calls/{call_id}` (a stored call's `approve_url`).
 * `root` is the page's root folder (config.json, dev/token): whatever prefix a proxy puts in
 * front, the views are found relative to it. */

export type ApprovalsStatus = "pending" | "answered" | "expired";
export type View =
  | { kind: "chat" }
  | { kind: "inbox"; status: ApprovalsStatus }
  | { kind: "approval"; id: string }
  | { kind: "call"; id: string };

export const STATUSES: readonly ApprovalsStatus[] = ["pending", "answered", "expired"];
// The agent's APPROVAL_ID (agent/chat/approvals.py); it serves the page only for such ids.
const APPROVALS = /^(.*\/)approvals\/([A-Za-z0-9-]{1,64})?$/;
// The agent's CALL_ID (agent/chat/gated_calls.py).
const CALLS = /^(.*\/)calls\/(mcp-[0-9a-f-]{36})$/;

export function route(href: string): { root: URL; view: View } {
  const url = new URL(href);
  const c = CALLS.exec(url.pathname);
  if (c) return { root: new URL(c[1]!, url), view: { kind: "call", id: c[2]! } };
  const m = APPROVALS.exec(url.pathname);
  if (!m) return { root: new URL(".", url), view: { kind: "chat" } };
  const root = new URL(m[1]!, url);
  if (m[2]) return { root, view: { kind: "approval", id: m[2] } };
  const asked = url.searchParams.get("status");
  const status = STATUSES.find((s) => s === asked) ?? "pending";
  return { root, view: { kind: "inbox", status } };
}

/** The URL of a view, for links and history entries. */
export function href(root: URL, view: View): string {
  if (view.kind === "chat") return root.href;
  if (view.kind === "approval") return new URL(`approvals/${encodeURIComponent(view.id)}`, root).href;
  if (view.kind === "call") return new URL(`calls/${encodeURIComponent(view.id)}`, root).href;
  const url = new URL("approvals/", root);
  if (view.status !== "pending") url.searchParams.set("status", view.status);
  return url.href;
}
