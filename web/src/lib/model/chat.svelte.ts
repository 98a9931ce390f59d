/** AgentChat.Model: docs/ux.md's state machine, fed only by stream events and REST results.
 *
 *   send()/retry()/confirm()/deny() ─▶ stream.run(payload) ─ for await ─▶ onStreamData(event) ─▶ $state
 *   the 1 s tick ─▶ card timers, reconnect countdown (5 × 5 s), the idle poll (/active, probe),
 *                   the stream's watchdog (2 missed heartbeats: the connection is lost)
 *   openConversation() ─▶ REST history ─▶ items; loadOlder() ─▶ the page before, prepended
 *   edit()/regenerate()/switchBranch() ─▶ a new branch, or another one shown
 *
 * No DOM and no `$effect`: components read the `$state` fields and call the methods (docs/ux.md,
 * "Reactivity"). This class is the machine's façade: its `$state` (what the view reads), the
 * getters the view derives from it, and the transitions a person starts (send, stop, answer a
 * card, retry, open a conversation). The rest of the transitions live by concern, as functions
 * of the model and its non-reactive state, both typed in machine.ts (`ChatState`, which this
 * class implements, and `Inner`, which carries `openConversation` to them): they never import
 * this module, so the model's imports go one way. They are:
 *   stream.ts    a submit read to its end, and every event's transition (the reducer), the
 *                error event, the stream lost without its last event; after a final, history's
 *                ids onto the turn shown (history.ts's adoptStored)
 *   clock.ts     the tick: card expiry, the watchdog, the reconnect countdown and reconnect
 *                (a rejoin or a history reload), the idle poll and /active's multi-tab gate
 *   branches.ts  edit, regenerate (a fork) and the picker's switch
 * The answer's parts (text, tool cards, cards) are in parts.ts, history's items in history.ts,
 * the files of the next message in attachments.svelte.ts.
 */

import { WORDS, type Words } from "../i18n.js";
import { AttachmentsModel } from "./attachments.svelte.js";
import * as branches from "./branches.js";
import { applyActive, Clock } from "./clock.js";
import { fromHistory } from "./history.js";
import {
  type ChatState, type Current, type Inner, type ModelOptions, deadline, disconnected, HANG_MS, HISTORY_PAGE,
  joinPayload, localId, newAssistant, newInner, payload, withDefaults,
} from "./machine.js";
import { itemOf } from "./parts.js";
import * as stream from "./stream.js";
import {
  type Active, type CardView, type ChatEvent, type Connection, type ErrorView, type FsmState, type Item,
  RestError,
} from "./types.js";

export type { ModelOptions } from "./machine.js";

export class ChatModel implements ChatState {
  state = $state<FsmState>("idle");
  connection = $state<Connection>("connecting");
  items = $state<Item[]>([]);
  error = $state<ErrorView | null>(null);
  conversationId = $state<string | null>(null);
  examples = $state<string[]>([]);
  /** Another tab holds the conversation's lease (`/active`): Send is disabled. */
  gated = $state(false);
  /** Text handed back to the input (a message refused before it was stored). */
  draft = $state("");
  reconnect = $state({ attempt: 0, secondsLeft: 0 });
  now = $state(Date.now());

  readonly words: Words;
  /** The files for the next message. */
  readonly files: AttachmentsModel;
  /** Older history to load (`loadOlder()`), and whether it is loading. */
  olderCursor = $state<string | null>(null);
  loadingOlder = $state(false);

  /** The machine's non-reactive state, shared with its modules (machine.ts). */
  readonly #inner: Inner;
  readonly #clock: Clock;

  constructor(opts: ModelOptions) {
    this.#inner = newInner(withDefaults(opts), (id) => this.openConversation(id));
    this.#clock = new Clock(this, this.#inner);
    this.words = WORDS[opts.lang];
    this.files = new AttachmentsModel(opts.upload ?? null, this.words, opts.limits);
  }

  // -- what the view reads ------------------------------------------------------------------

  /** The card to answer (pending) or the expired one still shown, if any. */
  get card(): CardView | null {
    for (let i = this.items.length - 1; i >= 0; i--) {
      const it = this.items[i]!;
      if (it.kind !== "assistant") continue;
      for (let j = it.parts.length - 1; j >= 0; j--) {
        const p = it.parts[j]!;
        if (p.kind === "card") return p.status === "pending" || p.status === "expired" ? p : null;
      }
    }
    return null;
  }

  get streaming(): boolean {
    return this.state === "streaming";
  }

  /** `aria-busy` of the log. */
  get busy(): boolean {
    return this.state === "streaming" || this.state === "loading_history";
  }

  get inputLocked(): boolean {
    return this.state === "streaming" || this.state === "awaiting_confirmation" ||
      this.state === "loading_history" || this.state === "disconnected" ||
      this.state === "disconnected_permanent";
  }

  get canSend(): boolean {
    return !this.inputLocked && !this.gated;
  }

  /** A new conversation: the welcome card. */
  get isNew(): boolean {
    return this.items.length === 0 && (this.state === "idle" || this.state === "error" && this.error?.kind === "not_sent");
  }

  secondsLeft(card: CardView): number {
    return Math.max(0, Math.ceil((card.expiresAt - this.now) / 1000));
  }

  secondsToArm(card: CardView): number {
    return Math.max(0, Math.ceil((card.armedAt - this.now) / 1000));
  }

  canAnswer(card: CardView): boolean {
    return card.status === "pending" && !card.answering &&
      (this.state === "awaiting_confirmation" || this.state === "error");
  }

  canConfirm(card: CardView): boolean {
    return this.canAnswer(card) && card.permissionGranted && !card.approval
      && this.now >= card.armedAt;
  }

  /** Retry buttons (error card, tool 🔄, «Повторить запрос?») work when nothing streams. */
  get canRetry(): boolean {
    return this.conversationId !== null && (this.state === "idle" || this.state === "error") && !this.gated;
  }

  // -- lifecycle ----------------------------------------------------------------------------

  async start(conversationId: string | null = null): Promise<void> {
    this.#clock.start();
    this.connection = "connecting";
    try {
      const { examples } = await deadline(this.#inner.options.transport.connect(), HANG_MS);
      this.examples = examples;
      this.connection = "connected";
    } catch {
      disconnected(this, this.#inner); // 002: idle ──[connect fail]──→ disconnected
      this.#inner.reloadAfterReconnect = conversationId !== null;
      this.conversationId = conversationId;
      return;
    }
    if (conversationId) await this.openConversation(conversationId);
  }

  dispose(): void {
    this.#clock.stop();
    const cur = this.#inner.cur;
    this.#inner.cur = null;
    if (cur) cur.cancelled = true; // a dropped connection is not a cancel: the run goes on
  }

  // -- actions ------------------------------------------------------------------------------

  send(text: string): void {
    const t = text.trim();
    const files = this.files.ready;
    if (!t && !files.length || !this.canSend || this.files.uploading) return;
    this.draft = "";
    this.files.clear();
    this.items.push({ kind: "user", id: localId("u"), text: t, files: files.map((f) => f.orig_name) });
    const item = newAssistant(this);
    const p = payload(this, this.#inner, t, null);
    p.message.files = files;
    void stream.run(this, this.#inner, p, item, "message", t);
  }

  /** Edit a stored user message (docs/protocol.md §4, "Branches"): the new text runs on a new
   * branch from just before it; the picker then shows both. */
  edit(messageId: string, text: string): void {
    branches.edit(this, this.#inner, messageId, text);
  }

  /** Regenerate a stored answer: its user message runs again on a new branch. */
  regenerate(messageId: string): void {
    branches.regenerate(this, this.#inner, messageId);
  }

  /** The picker: the branch through `messageId` becomes the active one, and is shown. */
  switchBranch(messageId: string | undefined): Promise<void> {
    return branches.switchBranch(this, this.#inner, messageId);
  }

  /** Stop: submission.cancel(); the partial answer stays (streaming ──[cancel]──→ idle). A run
   * this tab joined (after a reconnect or a reload) is stopped by its run_id: cancelling a
   * join only stops following it (docs/protocol.md §4). */
  stop(): void {
    const cur = this.#inner.cur;
    if (!cur || this.state !== "streaming") return;
    cur.cancelled = true;
    this.#inner.cur = null;
    cur.item.partial = true;
    this.state = "idle";
    if (cur.kind === "join" && cur.runId && this.conversationId) {
      this.#inner.options.rest.cancelRun(this.conversationId, cur.runId, this.#inner.options.tabId).catch((e: unknown) => {
        const detail = e instanceof RestError ? e.detail || e.code : String(e);
        this.error = { kind: "stream", code: e instanceof RestError ? e.code : "INTERNAL", text: detail, retryable: false };
        if (this.state === "idle") this.state = "error";
      });
    }
    void Promise.resolve(cur.sub?.cancel()).catch(() => undefined);
    this.#inner.options.onConversationsChanged?.();
  }

  confirm(): void {
    this.#answer("confirm");
  }

  deny(): void {
    this.#answer("deny");
  }

  /** Every retry button: `action: "retry"` re-runs the last turn; the message is never resent. */
  retry(): void {
    if (this.error?.kind === "history") {
      if (this.conversationId) void this.openConversation(this.conversationId);
      return;
    }
    if (!this.canRetry || !this.conversationId) return;
    const item = newAssistant(this);
    void stream.run(this, this.#inner, payload(this, this.#inner, "__retry__", "retry"), item, "retry", "");
  }

  /** Manual reconnect (the banner's button, also during the countdown). */
  reconnectNow(): void {
    if (this.state === "disconnected" || this.state === "disconnected_permanent") void this.#clock.tryReconnect();
  }

  newConversation(): void {
    if (this.state === "streaming" || this.state === "loading_history") return;
    this.#inner.cur = null;
    this.conversationId = null;
    this.items = [];
    this.error = null;
    this.gated = false;
    if (this.state !== "disconnected" && this.state !== "disconnected_permanent") this.state = "idle";
  }

  /** idle ──[load history]──→ loading_history ──[success]──→ idle | ──[failure]──→ error */
  async openConversation(conversationId: string): Promise<void> {
    if (this.state === "streaming") return;
    this.#inner.cur = null;
    this.conversationId = conversationId;
    this.items = [];
    this.error = null;
    this.gated = false;
    this.state = "loading_history";
    let active: Active | null = null;
    this.olderCursor = null;
    try {
      const page = await deadline(this.#inner.options.rest.history(conversationId, HISTORY_PAGE), 3 * HANG_MS);
      if (this.conversationId !== conversationId) return; // another was opened meanwhile
      active = await deadline(this.#inner.options.rest.active(conversationId), HANG_MS).catch(() => null);
      this.items = fromHistory(page.items, Date.now(), this.#inner.options.armS * 1000);
      this.olderCursor = page.next_cursor;
    } catch (e) {
      if (this.conversationId !== conversationId) return;
      if (e instanceof RestError && e.unreachable) {
        this.#inner.reloadAfterReconnect = true;
        disconnected(this, this.#inner);
        return;
      }
      const detail = e instanceof RestError ? e.detail || e.code : e instanceof Error ? e.message : String(e);
      this.error = { kind: "history", code: e instanceof RestError ? e.code : "INTERNAL",
                     text: this.words.historyFailed(detail), retryable: true };
      this.state = "error";
      return;
    }
    this.state = this.card?.status === "pending" ? "awaiting_confirmation" : "idle";
    const following = active !== null && applyActive(this, this.#inner, active);
    // A reloaded tab follows the run still going on (docs/protocol.md §4: /active's `run`).
    if (active?.run?.status === "running" && !this.gated && !following) {
      const item = newAssistant(this);
      void stream.run(this, this.#inner, joinPayload(this.#inner, active.run.run_id, 0, conversationId), item, "join", "");
    }
  }

  /** The history page before the oldest shown (the log scrolled to its top), prepended. */
  async loadOlder(): Promise<void> {
    const cid = this.conversationId;
    const cursor = this.olderCursor;
    if (!cid || !cursor || this.loadingOlder || this.state === "loading_history") return;
    this.loadingOlder = true;
    try {
      const page = await deadline(this.#inner.options.rest.history(cid, HISTORY_PAGE, cursor), 3 * HANG_MS);
      if (this.conversationId !== cid || this.olderCursor !== cursor) return;
      const seen = new Set(this.items.map((i) => i.id));
      const older = fromHistory(page.items, Date.now(), this.#inner.options.armS * 1000).filter((i) => !seen.has(i.id));
      this.items.unshift(...older);
      this.olderCursor = page.next_cursor;
    } catch {
      // the next scroll to the top asks again
    } finally {
      this.loadingOlder = false;
    }
  }

  /** One event of the current submit (stream.ts; the event is the model's own copy). */
  onStreamData(ev: ChatEvent, cur: Current): void {
    stream.onStreamData(this, this.#inner, ev, cur);
  }

  // -- helpers ------------------------------------------------------------------------------

  #answer(action: "confirm" | "deny"): void {
    const card = this.card;
    if (!card || !this.canAnswer(card) || action === "confirm" && !this.canConfirm(card)) return;
    card.answering = true;
    const item = itemOf(this.items, card) ?? newAssistant(this);
    const p = payload(this, this.#inner, "__resume__", action);
    p.message.confirm_id = card.confirmId;
    if (action === "confirm" && card.calls.length) {
      p.message.approve = card.calls.filter((c) => c.checked).map((c) => c.callId);
    }
    void stream.run(this, this.#inner, p, item, "resume", "");
  }
}
