/** The REST calls the panel makes (docs/protocol.md §9, agent/README_rest.md), with `fetch`.
 * `getToken()` is asked before every call; the token is never kept. */

import { type Active, type Conversation, type HistoryMessage, type Page, type Rest, RestError, UNREACHABLE } from "./types.js";

export interface RestOptions {
  /** `/api/assistant` (conversations, history). */
  assistantUrl: string;
  /** `/api/agent` (active). */
  agentUrl: string;
  getToken: () => Promise<string | null>;
  fetch?: typeof fetch;
}

/** One JSON call with the caller's token: the answer's body, or a RestError with the API's
 * `{code, detail}` (UNREACHABLE when nothing, or a gateway, answered). Also the page's
 * approvals calls (web/src/page/approvals). */
export function jsonCaller(getToken: () => Promise<string | null>, f?: typeof fetch):
    <T>(url: string, method?: string, json?: unknown) => Promise<T> {
  const doFetch = f ?? ((input, init) => fetch(input, init));
  return async function call<T>(url: string, method = "GET", json?: unknown): Promise<T> {
    const token = await getToken();
    const headers: Record<string, string> = { accept: "application/json" };
    if (token) headers.authorization = `Bearer ${token}`;
    if (json !== undefined) headers["content-type"] = "application/json";
    let resp: Response;
    try {
      resp = await doFetch(url, {
        method, headers, credentials: "same-origin", body: json === undefined ? undefined : JSON.stringify(json),
      });
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
  };
}

export function createRest(opts: RestOptions): Rest {
  const call = jsonCaller(opts.getToken, opts.fetch);
  const a = opts.assistantUrl.replace(/\/$/, "");
  const g = opts.agentUrl.replace(/\/$/, "");
  const enc = encodeURIComponent;
  return {
    conversations: ({ q, includeArchived, limit = 50, cursor }) => {
      const qs = new URLSearchParams({ limit: String(limit) });
      if (q) qs.set("q", q);
      if (includeArchived) qs.set("include_archived", "true");
      if (cursor) qs.set("cursor", cursor);
      return call(`${a}/conversations?${qs}`);
    },
    remove: (id) => call<Conversation>(`${a}/conversations/${enc(id)}`, "DELETE"),
    restore: (id) => call<Conversation>(`${a}/conversations/${enc(id)}/restore`, "POST"),
    rename: (id, title) => call<Conversation>(`${a}/conversations/${enc(id)}`, "PATCH", { title }),
    history: (cid, limit = 50, cursor = null) => {
      const qs = new URLSearchParams({ conversation_id: cid, limit: String(limit) });
      if (cursor) qs.set("cursor", cursor);
      return call<Page<HistoryMessage>>(`${a}/history?${qs}`);
    },
    active: (cid) => call<Active>(`${g}/conversations/${enc(cid)}/active`),
    cancelRun: (cid, runId, tabId) =>
      call(`${g}/conversations/${enc(cid)}/runs/${enc(runId)}/cancel`, "POST", { tab_id: tabId }),
    branch: (cid, messageId, tabId) =>
      call(`${a}/conversations/${enc(cid)}/branch`, "POST", { message_id: messageId, tab_id: tabId }),
  };
}
