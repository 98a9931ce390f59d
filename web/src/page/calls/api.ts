/** The calls REST API (docs/protocol.md §12) the call page uses, with the page's token: one
 * call an MCP client of the signed-in person made, and their answer to it. */

import { jsonCaller } from "../../lib/model/rest.js";

export type CallState = "pending" | "running" | "done" | "denied" | "expired" | "failed";

export interface CallItem {
  call_id: string;
  status: CallState;
  tool: string;
  environment: string | null;
  args_digest: string;
  /** Who answers: the requester inline or on this page, or someone else (an approval). */
  ask: "inline" | "confirmation" | "approval";
  prompt: string;
  expires_at: string;
  created_at: string;
  approve_url: string;
  result: unknown;
  error: string | null;
}

export interface CallsApi {
  get(id: string): Promise<CallItem>;
  answer(id: string, decision: "confirm" | "deny", argsDigest: string): Promise<CallItem>;
}

export function callsApi(agentUrl: string, getToken: () => Promise<string | null>): CallsApi {
  const call = jsonCaller(getToken);
  const base = `${agentUrl.replace(/\/$/, "")}/calls`;
  const enc = encodeURIComponent;
  return {
    get: (id) => call(`${base}/${enc(id)}`),
    answer: (id, decision, argsDigest) =>
      call(`${base}/${enc(id)}`, "POST", { decision, args_digest: argsDigest }),
  };
}
