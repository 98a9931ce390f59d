/** The approvals REST calls (docs/protocol.md §11) the pages make, with the page's token. */

import { jsonCaller } from "../../lib/model/rest.js";
import type { ApprovalsStatus } from "../route.js";

export interface ApproverAnswer {
  approver: string;
  decision: "approve" | "deny";
  comment: string;
  channel: string;
  at: string;
}

export interface ApprovalItem {
  approval_id: string;
  conversation_id: string;
  requester: string;
  tool_name: string;
  title: string | null;
  prompt: string | null;
  environment: string | null;
  risk: string | null;
  tool_args: Record<string, unknown>;
  /** A batched card's calls, approved together (docs/protocol.md §11); null for one call. */
  calls?: { call_id: string; prompt: string; arguments: Record<string, unknown> }[] | null;
  args_digest: string;
  approvers: string[];
  quorum: number;
  status: "pending" | "approved" | "denied" | "cancelled" | "expired";
  answers: ApproverAnswer[];
  created_at: string;
  expires_at: string;
  escalated_at: string | null;
  approve_url: string;
}

export interface ApprovalDetail extends ApprovalItem {
  message: string | null;
  rule: { rule?: number; grant_max_minutes?: number; escalate_after_s?: number } | null;
}

export interface AnswerIn {
  decision: "approve" | "deny";
  args_digest: string;
  comment: string;
  grant_minutes?: number;
}

export interface AnswerOut {
  approval_id: string;
  status: "pending" | "approved" | "denied";
  approvals: number;
  quorum: number;
  run_id: string | null;
  grant_id: string | null;
}

export interface ApprovalsApi {
  list(status: ApprovalsStatus, cursor: string | null): Promise<{ items: ApprovalItem[]; next_cursor: string | null }>;
  get(id: string): Promise<ApprovalDetail>;
  answer(id: string, body: AnswerIn): Promise<AnswerOut>;
}

export function approvalsApi(agentUrl: string, getToken: () => Promise<string | null>): ApprovalsApi {
  const call = jsonCaller(getToken);
  const base = `${agentUrl.replace(/\/$/, "")}/approvals`;
  const enc = encodeURIComponent;
  return {
    list: (status, cursor) => {
      const qs = new URLSearchParams({ status, limit: "20" });
      if (cursor) qs.set("cursor", cursor);
      return call(`${base}?${qs}`);
    },
    get: (id) => call(`${base}/${enc(id)}`),
    answer: (id, body) => call(`${base}/${enc(id)}`, "POST", body),
  };
}
