/** The wire as docs/protocol.md §2 and §9 describe it, and the model's own view types. */

/** docs/ux.md's state machine, exactly its states. The expired card is `idle` with a card whose
 * status is `expired` (002: "awaiting_confirmation ──[timeout 5min]──→ idle (expired)"). */
export type FsmState =
  | "idle"
  | "streaming"
  | "awaiting_confirmation"
  | "error"
  | "disconnected"
  | "disconnected_permanent"
  | "loading_history";

export type Connection = "connecting" | "connected" | "disconnected";

export interface EventMeta {
  type?: string;
  seq: number;
  run_id: string | null;
  conversation_id: string | null;
  [field: string]: unknown;
}

/** One /chat event: a ChatMessage dict. */
export interface ChatEvent {
  role: string;
  content: string;
  metadata: EventMeta;
}

/** What @gradio/client's submit() iterator yields (the parts the panel reads). */
export type StreamMessage =
  | { type: "data"; data: unknown[] }
  | { type: "status"; stage: string; message?: string }
  | { type: string; [k: string]: unknown };

export interface Submission extends AsyncIterable<StreamMessage> {
  cancel(): Promise<void> | void;
}

export interface ChatPayload {
  message: {
    text: string;
    files: FileData[];
    tab_id: string;
    confirm_id?: string;
    run_id?: string;
    last_seq?: number;
    /** An edit's user message, a regenerate's answer (docs/protocol.md §4, "Branches"). */
    message_id?: string;
    /** A batched card's confirm: the call ids that run, the rest denied (docs/protocol.md §3). */
    approve?: string[];
  };
  action: "confirm" | "deny" | "retry" | "join" | "edit" | "regenerate" | null;
  conversation_id: string | null;
  uicontext: string | null;
  env_id: string | null;
}

/** The agent seen from the model: connect, stream a submit, and a cheap liveness probe. */
export interface Transport {
  /** (Re)connect; resolves with the welcome chips from the Gradio config. */
  connect(): Promise<{ examples: string[] }>;
  submit(payload: ChatPayload): Promise<Submission>;
  /** True when the agent answers at all. */
  probe(): Promise<boolean>;
}

export interface Conversation {
  id: string;
  title: string | null;
  created_at: string;
  last_activity_at: string;
  is_archived: boolean;
  archived_at: string | null;
}

export interface HistoryToolCall {
  call_id: string;
  tool: string;
  title?: string;
  input: unknown;
  output: unknown;
  outcome: string;
  error: string | null;
  attempts: number;
}

export interface HistoryConfirmation {
  confirm_id: string;
  call_id: string;
  tool_name: string;
  status: string;
  card: Record<string, unknown>;
}

/** A message's alternatives (edits, regenerations): what the `‹ 2/3 ›` picker shows. */
export interface Siblings {
  index: number;
  count: number;
  ids: string[];
}

export interface HistoryMessage {
  id: string;
  parent_id?: string | null;
  siblings?: Siblings | null;
  conversation_id: string;
  turn_id: string;
  role: "user" | "assistant";
  content: string;
  partial: boolean;
  created_at: string;
  tool_calls: HistoryToolCall[];
  confirmations: HistoryConfirmation[];
}

export interface Active {
  active: boolean;
  until: string | null;
  run: { run_id: string; status: string; last_seq: number } | null;
}

export const UNREACHABLE = "GRADIO_UNREACHABLE";

/** A REST failure: `{code, detail}` from the API, or `GRADIO_UNREACHABLE` when nothing answered. */
export class RestError extends Error {
  constructor(readonly status: number, readonly code: string, readonly detail: string) {
    super(`${status} ${code}: ${detail}`);
  }
  /** Nothing answered, or a gateway did instead of the agent (no `{code}` body). */
  get unreachable(): boolean {
    return this.code === UNREACHABLE;
  }
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

export interface Rest {
  conversations(q: { q?: string; includeArchived?: boolean; limit?: number; cursor?: string | null }): Promise<Page<Conversation>>;
  remove(id: string): Promise<Conversation>;
  restore(id: string): Promise<Conversation>;
  rename(id: string, title: string): Promise<Conversation>;
  /** Newest page first; `cursor` (a page's `next_cursor`) pages back. */
  history(conversationId: string, limit?: number, cursor?: string | null): Promise<Page<HistoryMessage>>;
  active(conversationId: string): Promise<Active>;
  /** Stop by run_id (docs/protocol.md §4): a run this tab joined rather than submitted. */
  cancelRun(conversationId: string, runId: string, tabId: string): Promise<{ run_id: string; status: string }>;
  /** Make the branch through `messageId` the active one (docs/protocol.md §4, "Branches"). */
  branch(conversationId: string, messageId: string, tabId: string): Promise<{ conversation_id: string; leaf_id: string }>;
}

/** A Gradio file object (docs/protocol.md §1) from the upload route. */
export interface FileData {
  path: string;
  orig_name: string;
  size: number;
  mime_type: string;
  meta: { _type: "gradio.FileData" };
}

/** One file to the upload route; `progress(0…1)` as its bytes go. Refusals are RestErrors. */
export type Uploader = (file: File, progress: (fraction: number) => void) => Promise<FileData>;

// -- the view ----------------------------------------------------------------------------------

export type ToolStatus = "running" | "retrying" | "done" | "error" | "timeout";

export interface ToolView {
  kind: "tool";
  callId: string;
  tool: string;
  title: string;
  status: ToolStatus;
  input: unknown;
  output: unknown;
  error: string | null;
  attempt: number;
  maxAttempts: number;
  timeoutSeconds: number;
  retryable: boolean;
}

export type CardStatus = "pending" | "confirmed" | "denied" | "expired";

export interface Alternative {
  action: string;
  prompt: string;
}

export interface CardView {
  kind: "card";
  confirmId: string;
  title: string;
  prompt: string;
  risk: string;
  riskLevel: string;
  dangerous: boolean;
  env: string;
  permissionGranted: boolean;
  requiredRole: string | null;
  /** Why an untrusted card is asked, in the turn's language (docs/protocol.md §3). */
  reason: string | null;
  alternatives: Alternative[];
  /** Set when someone else must approve it (docs/protocol.md §11): Confirm is not offered, the
   * requester may only cancel the request. */
  approval: { approvers: string[]; quorum: number; approveUrl: string } | null;
  /** A batched card's calls (docs/protocol.md §2, `calls`), each with its checkbox; empty for a
   * card of one call. */
  calls: CardCall[];
  /** Epoch ms. */
  expiresAt: number;
  /** Epoch ms from which Confirm is enabled (10 s after a dangerous card arrives). */
  armedAt: number;
  status: CardStatus;
  /** An answer is on its way (buttons off, so a double click cannot answer twice). */
  answering: boolean;
}

/** One call of a batched card; `checked`: it runs on Confirm (all are, until unchecked). */
export interface CardCall {
  callId: string;
  title: string;
  prompt: string;
  risk: string;
  env: string;
  checked: boolean;
}

export interface TextView {
  kind: "text";
  runId: string | null;
  text: string;
}

export interface AlternativesView {
  kind: "alternatives";
  alternatives: Alternative[];
}

export type Part = TextView | ToolView | CardView | AlternativesView;

export interface UserItem {
  kind: "user";
  id: string;
  text: string;
  /** The names of the files sent with it. */
  files?: string[];
  /** Stored (from history): it can be edited, and has these alternatives. */
  stored?: boolean;
  siblings?: Siblings | null;
}

export interface AssistantItem {
  kind: "assistant";
  id: string;
  parts: Part[];
  partial: boolean;
  /** Stored (from history): it can be regenerated. */
  stored?: boolean;
}

export type Item = UserItem | AssistantItem;

export interface ErrorView {
  /** `stream`: an error event (Retry sends action retry); `history`: a REST load failed
   * (Retry reloads); `not_sent`: refused before a run existed (the text goes back to the input). */
  kind: "stream" | "history" | "not_sent";
  code: string;
  text: string;
  retryable: boolean;
}
