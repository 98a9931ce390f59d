/** The REST calls the panel makes (docs/protocol.md §9, agent/README_rest.md), with `fetch`.
 * `getToken()` is asked before every call; the token is never kept. */

import { type Active, type Conversation, type HistoryMessage, type Rest, RestError, UNREACHABLE } from "./types.js";

export interface RestOptions {
  /** `/api/assistant` (conversations, history). */
  assistantUrl: string;
  /** `/api/agent` (active). */
  agentUrl: string;
  getToken: () => Promise<string | null>;
  fetch?: typeof fetch;
}

export function createRest(opts: RestOptions): Rest {
  const doFetch = opts.fetch ?? ((input, init) => fetch(input, init));

  async function call<T>(url: string, method = "GET"): Promise<T> {
    const token = await opts.getToken();
    const headers: Record<string, string> = { accept: "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    let resp: Response;
    try {
      resp = await doFetch(url, { method, headers, credentials: "same-origin" });
    } catch (e) {
      throw new RestError(0, UNREACHABLE, e instanceof Error ? e.message : String(e));
    }
    const body: unknown = await resp.json().catch(() => null);
    if (resp.ok) return body as T;
    const err = body as { code?: unknown; detail?: unknown } | null;
    if (err && typeof err.code === "string") {
      throw new RestError(resp.status, err.code, typeof err.detail === "string" ? err.detail : "");
    }
    // No {code, detail}: a proxy or gateway answered, not the agent.
    throw new RestError(resp.status, resp.status >= 502 ? UNREACHABLE : "INTERNAL", `HTTP ${resp.status}`);
  }

  const a = opts.assistantUrl.replace(/\/$/, "");
  const g = opts.agentUrl.replace(/\/$/, "");
  const enc = encodeURIComponent;
  return {
    conversations: ({ q, includeArchived, limit = 50 }) => {
      const qs = new URLSearchParams({ limit: String(limit) });
      if (q) qs.set("q", q);
      if (includeArchived) qs.set("include_archived", "true");
      return call(`${a}/conversations?${qs}`);
    },
    remove: (id) => call<Conversation>(`${a}/conversations/${enc(id)}`, "DELETE"),
    restore: (id) => call<Conversation>(`${a}/conversations/${enc(id)}/restore`, "POST"),
    history: (cid, limit = 100) =>
      call<{ items: HistoryMessage[]; next_cursor: string | null }>(
        `${a}/history?${new URLSearchParams({ conversation_id: cid, limit: String(limit) })}`),
    active: (cid) => call<Active>(`${g}/conversations/${enc(cid)}/active`),
  };
}
