/** What the state machine's modules share (chat.svelte.ts draws the split): the model's reactive
 * face as an interface (`ChatState`), the options, the non-reactive part of the machine (`Inner`:
 * what the view never reads), and the few transitions every module takes (`disconnected`, a new
 * answer item, the /chat payloads).
 *
 *   chat.svelte.ts (ChatModel implements ChatState) ─▶ stream.ts, clock.ts, branches.ts
 *                                                 └────────┴─ all typed against this module only
 *
 * The modules read and write the `$state` fields on the model itself (a `$state` field is an
 * accessor, so a write from here is seen by the view); what they need of ChatModel's own
 * transitions (opening a conversation) reaches them through `Inner`, passed in by the model.
 */

import type { Limits } from "./attachments.svelte.js";
import type {
  AlternativesView, AssistantItem, CardView, ChatPayload, Connection, ErrorView, FsmState, Item, Rest, Submission,
  Transport, Uploader,
} from "./types.js";
import type { Lang, Words } from "../i18n.js";

/** The model as its modules see it: ChatModel's `$state` fields (what the view reads) and the
 * getters derived from them. */
export interface ChatState {
  state: FsmState;
  connection: Connection;
  items: Item[];
  error: ErrorView | null;
  conversationId: string | null;
  examples: string[];
  /** Another tab holds the conversation's lease (`/active`): Send is disabled. */
  gated: boolean;
  /** Text handed back to the input (a message refused before it was stored). */
  draft: string;
  reconnect: { attempt: number; secondsLeft: number };
  now: number;
  readonly words: Words;
  /** The card to answer (pending) or the expired one still shown, if any. */
  readonly card: CardView | null;
  readonly canSend: boolean;
}

export interface ModelOptions {
  transport: Transport;
  rest: Rest;
  tabId: string;
  lang: Lang;
  envId?: string | null;
  uicontext?: Record<string, unknown> | null;
  /** docs/ux.md: retry 5 × 5 s, then manual. */
  reconnectAttempts?: number;
  reconnectDelayS?: number;
  /** A dangerous card's Confirm is armed this long after it arrives. */
  armS?: number;
  /** The idle poll (/active for the multi-tab gate, else a liveness probe), in ticks of 1 s. */
  pollEveryS?: number;
  /** Told when a turn ends or the list may have changed (the conversation list reloads). */
  onConversationsChanged?: () => void;
  /** Where this tab keeps the ids of the runs it started, so a reloaded tab (same tab_id, so
   * the same lease) does not take its own lease for another tab's. */
  ownRuns?: { load(): string[]; save(ids: string[]): void };
  /** The agent's /chat heartbeat (docs/protocol.md §2, `config.json`'s `heartbeat_s`): a
   * stream silent for two of them is a lost connection, rejoined. 0: no watchdog. */
  heartbeatS?: number;
  /** The upload route (upload.ts); without it the panel offers no attachments. */
  upload?: Uploader | null;
  limits?: Limits;
}

/** The options with their defaults filled in. */
export type Options = Required<Omit<ModelOptions, "envId" | "uicontext" | "onConversationsChanged" | "ownRuns" | "upload" | "limits">> & ModelOptions;

export function withDefaults(opts: ModelOptions): Options {
  return { reconnectAttempts: 5, reconnectDelayS: 5, armS: 10, pollEveryS: 5, heartbeatS: 15, ...opts };
}

/** History loads this many messages a page (docs/protocol.md §9, at most 100). */
export const HISTORY_PAGE = 50;

/** A connect or poll that neither answers nor fails (a half-open connection) must not hold the
 * machine: after this long it counts as failed. */
export const HANG_MS = 10_000;

export function deadline<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("no answer")), ms);
    p.then((v) => { clearTimeout(t); resolve(v); }, (e: unknown) => { clearTimeout(t); reject(e); });
  });
}

/** One submit being read. */
export interface Current {
  kind: "message" | "resume" | "retry" | "join" | "fork";
  item: AssistantItem;
  text: string; // the user's text of a new message (back to the input when refused)
  runId: string | null;
  lastSeq: number;
  nullSeq: number; // seq of events without a run (errors before one exists), for the repeat
  attempt?: number; // the run's attempt as last seen (`run_resumed`: another replica took it over)
  terminal: boolean;
  cancelled: boolean;
  deniedAlternatives: AlternativesView["alternatives"] | null;
  sub: Submission | null;
}

/** What to rejoin after a reconnect. */
export interface Rejoin {
  runId: string;
  lastSeq: number;
  conversationId: string;
  item: AssistantItem;
}

/** The machine's non-reactive state, one object shared by its modules (ChatModel keeps it
 * private: the view never reads it). */
export interface Inner {
  readonly options: Options;
  /** ChatModel's `openConversation` (history read anew: a fork's answer, a reconnect, the
   * picker), passed in so that its modules need not import the model. */
  readonly openConversation: (conversationId: string) => Promise<void>;
  /** The submit being read (stream.ts), null when none. */
  cur: Current | null;
  /** When the stream last said anything: the clock's watchdog (clock.ts). */
  lastDataAt: number;
  /** What a reconnect follows: a run to rejoin, or history to reload (clock.ts). */
  rejoin: Rejoin | null;
  reloadAfterReconnect: boolean;
  /** The runs this tab started (its own lease is not another tab's, clock.ts). */
  readonly ownRuns: Set<string>;
  /** The items before an edit or a regenerate, put back when it is refused before a run. */
  beforeFork: Item[] | null;
  /** A card someone else approves: the conversation's newest run when it was shown; a newer
   * one is the run the approval started (clock.ts `applyActive`). By confirm_id. */
  readonly approvalBase: Map<string, string | null>;
}

export function newInner(options: Options, openConversation: Inner["openConversation"]): Inner {
  return {
    options, openConversation, cur: null, lastDataAt: 0, rejoin: null, reloadAfterReconnect: false,
    ownRuns: new Set(options.ownRuns?.load() ?? []), beforeFork: null, approvalBase: new Map(),
  };
}

let nextId = 0;
/** A local id for an item not (yet) known to be stored. */
export const localId = (p: string): string => `${p}-${++nextId}`;

/** The connection is gone: the countdown of the first reconnect starts (clock.ts). */
export function disconnected(model: ChatState, inner: Inner): void {
  model.connection = "disconnected";
  model.state = "disconnected";
  model.reconnect = { attempt: 1, secondsLeft: inner.options.reconnectDelayS };
}

/** Push an assistant item and return the reactive proxy the array holds. */
export function newAssistant(model: ChatState): AssistantItem {
  model.items.push({ kind: "assistant", id: localId("a"), parts: [], partial: false });
  return model.items[model.items.length - 1] as AssistantItem;
}

export function payload(model: ChatState, inner: Inner, text: string, action: ChatPayload["action"]): ChatPayload {
  return {
    message: { text, files: [], tab_id: inner.options.tabId },
    action,
    conversation_id: model.conversationId,
    uicontext: action === null && inner.options.uicontext ? JSON.stringify(inner.options.uicontext) : null,
    env_id: inner.options.envId ?? null,
  };
}

export function joinPayload(inner: Inner, runId: string, lastSeq: number, conversationId: string): ChatPayload {
  return {
    message: { text: "", files: [], tab_id: inner.options.tabId, run_id: runId, last_seq: lastSeq },
    action: "join", conversation_id: conversationId, uicontext: null, env_id: null,
  };
}
