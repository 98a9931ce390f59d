/** AgentChat.Model: docs/ux.md's state machine, fed only by stream events and REST results.
 *
 *   send()/retry()/confirm()/deny() ─▶ #run(payload) ─ for await ─▶ onStreamData(event) ─▶ $state
 *   the 1 s tick ─▶ card timers, reconnect countdown (5 × 5 s), the idle poll (/active, probe),
 *                   the stream's watchdog (2 missed heartbeats: the connection is lost)
 *   openConversation() ─▶ REST history ─▶ items; loadOlder() ─▶ the page before, prepended
 *
 * No DOM and no `$effect`: components read the `$state` fields and call the methods (docs/ux.md,
 * "Reactivity"). One module because the machine is one: every transition is in this file
 * (about 640 lines; the answer's parts — text, tool cards, cards — are in parts.ts, the files
 * of the next message in attachments.svelte.ts; splitting the transitions would scatter 002's
 * table across files).
 */

import { WORDS, type Lang, type Words } from "../i18n.js";
import { AttachmentsModel, type Limits } from "./attachments.svelte.js";
import { cardFrom } from "./cards.js";
import { fromHistory } from "./history.js";
import { appendText, dropTurn, finalText, findCard, itemOf, newTool, pendingCards, upsertTool } from "./parts.js";
import {
  type Active, type AlternativesView, type AssistantItem, type CardView, type ChatEvent,
  type ChatPayload, type Connection, type ErrorView, type FsmState, type Item,
  type Rest, RestError, type Submission, type Transport, type Uploader,
} from "./types.js";

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

/** History loads this many messages a page (docs/protocol.md §9, at most 100). */
const HISTORY_PAGE = 50;

/** One submit being read. */
interface Current {
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
interface Rejoin {
  runId: string;
  lastSeq: number;
  conversationId: string;
  item: AssistantItem;
}

/** A connect or poll that neither answers nor fails (a half-open connection) must not hold the
 * machine: after this long it counts as failed. */
const HANG_MS = 10_000;

function deadline<T>(p: Promise<T>, ms: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("no answer")), ms);
    p.then((v) => { clearTimeout(t); resolve(v); }, (e: unknown) => { clearTimeout(t); reject(e); });
  });
}

let nextId = 0;
const id = (p: string): string => `${p}-${++nextId}`;

export class ChatModel {
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

  readonly #o: Required<Omit<ModelOptions, "envId" | "uicontext" | "onConversationsChanged" | "ownRuns" | "upload" | "limits">> & ModelOptions;
  #lastDataAt = 0;
  #cur: Current | null = null;
  #rejoin: Rejoin | null = null;
  #reloadAfterReconnect = false;
  #ownRuns = new Set<string>();
  #ticker: ReturnType<typeof setInterval> | null = null;
  #ticks = 0;
  #polling = false;
  /** The items before an edit or a regenerate, put back when it is refused before a run. */
  #beforeFork: Item[] | null = null;

  constructor(opts: ModelOptions) {
    this.#o = { reconnectAttempts: 5, reconnectDelayS: 5, armS: 10, pollEveryS: 5, heartbeatS: 15, ...opts };
    this.words = WORDS[opts.lang];
    this.files = new AttachmentsModel(opts.upload ?? null, this.words, opts.limits);
    for (const r of opts.ownRuns?.load() ?? []) this.#ownRuns.add(r);
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
    this.#ticker ??= setInterval(() => this.#tick(), 1000);
    this.connection = "connecting";
    try {
      const { examples } = await deadline(this.#o.transport.connect(), HANG_MS);
      this.examples = examples;
      this.connection = "connected";
    } catch {
      this.#disconnected(); // 002: idle ──[connect fail]──→ disconnected
      this.#reloadAfterReconnect = conversationId !== null;
      this.conversationId = conversationId;
      return;
    }
    if (conversationId) await this.openConversation(conversationId);
  }

  dispose(): void {
    if (this.#ticker) clearInterval(this.#ticker);
    this.#ticker = null;
    const cur = this.#cur;
    this.#cur = null;
    if (cur) cur.cancelled = true; // a dropped connection is not a cancel: the run goes on
  }

  // -- actions ------------------------------------------------------------------------------

  send(text: string): void {
    const t = text.trim();
    const files = this.files.ready;
    if (!t && !files.length || !this.canSend || this.files.uploading) return;
    this.draft = "";
    this.files.clear();
    this.items.push({ kind: "user", id: id("u"), text: t, files: files.map((f) => f.orig_name) });
    const item = this.#newAssistant();
    const payload = this.#payload(t, null);
    payload.message.files = files;
    void this.#run(payload, item, "message", t);
  }

  /** Edit a stored user message (docs/protocol.md §4, "Branches"): the new text runs on a new
   * branch from just before it; the picker then shows both. */
  edit(messageId: string, text: string): void {
    const t = text.trim();
    const at = this.items.findIndex((i) => i.id === messageId && i.kind === "user");
    if (!t || at < 0) return;
    this.#fork(at, t, "edit", messageId);
  }

  /** Regenerate a stored answer: its user message runs again on a new branch. */
  regenerate(messageId: string): void {
    let at = this.items.findIndex((i) => i.id === messageId && i.kind === "assistant");
    while (at > 0 && this.items[at]?.kind !== "user") at--;
    const user = this.items[at];
    if (at < 0 || user?.kind !== "user") return;
    this.#fork(at, user.text, "regenerate", messageId);
  }

  #fork(at: number, text: string, action: "edit" | "regenerate", messageId: string): void {
    if (!this.canSend || !this.conversationId) return;
    this.#beforeFork = [...this.items];
    this.items = this.items.slice(0, at);
    this.items.push({ kind: "user", id: id("u"), text });
    const item = this.#newAssistant();
    const payload = this.#payload(action === "edit" ? text : "", action);
    payload.message.message_id = messageId;
    void this.#run(payload, item, "fork", text);
  }

  /** The picker: the branch through `messageId` becomes the active one, and is shown. */
  async switchBranch(messageId: string | undefined): Promise<void> {
    const cid = this.conversationId;
    if (!cid || !messageId || !this.canSend) return;
    try {
      await deadline(this.#o.rest.branch(cid, messageId, this.#o.tabId), HANG_MS);
    } catch (e) {
      const code = e instanceof RestError ? e.code : "INTERNAL";
      this.error = { kind: "not_sent", code, text: e instanceof RestError ? e.detail || code : String(e), retryable: false };
      return;
    }
    await this.openConversation(cid);
  }

  /** Stop: submission.cancel(); the partial answer stays (streaming ──[cancel]──→ idle). A run
   * this tab joined (after a reconnect or a reload) is stopped by its run_id: cancelling a
   * join only stops following it (docs/protocol.md §4). */
  stop(): void {
    const cur = this.#cur;
    if (!cur || this.state !== "streaming") return;
    cur.cancelled = true;
    this.#cur = null;
    cur.item.partial = true;
    this.state = "idle";
    if (cur.kind === "join" && cur.runId && this.conversationId) {
      this.#o.rest.cancelRun(this.conversationId, cur.runId, this.#o.tabId).catch((e: unknown) => {
        const detail = e instanceof RestError ? e.detail || e.code : String(e);
        this.error = { kind: "stream", code: e instanceof RestError ? e.code : "INTERNAL", text: detail, retryable: false };
        if (this.state === "idle") this.state = "error";
      });
    }
    void Promise.resolve(cur.sub?.cancel()).catch(() => undefined);
    this.#o.onConversationsChanged?.();
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
    const item = this.#newAssistant();
    void this.#run(this.#payload("__retry__", "retry"), item, "retry", "");
  }

  /** Manual reconnect (the banner's button, also during the countdown). */
  reconnectNow(): void {
    if (this.state === "disconnected" || this.state === "disconnected_permanent") void this.#tryReconnect();
  }

  newConversation(): void {
    if (this.state === "streaming" || this.state === "loading_history") return;
    this.#cur = null;
    this.conversationId = null;
    this.items = [];
    this.error = null;
    this.gated = false;
    if (this.state !== "disconnected" && this.state !== "disconnected_permanent") this.state = "idle";
  }

  /** idle ──[load history]──→ loading_history ──[success]──→ idle | ──[failure]──→ error */
  async openConversation(conversationId: string): Promise<void> {
    if (this.state === "streaming") return;
    this.#cur = null;
    this.conversationId = conversationId;
    this.items = [];
    this.error = null;
    this.gated = false;
    this.state = "loading_history";
    let active: Active | null = null;
    this.olderCursor = null;
    try {
      const page = await deadline(this.#o.rest.history(conversationId, HISTORY_PAGE), 3 * HANG_MS);
      if (this.conversationId !== conversationId) return; // another was opened meanwhile
      active = await deadline(this.#o.rest.active(conversationId), HANG_MS).catch(() => null);
      this.items = fromHistory(page.items, Date.now(), this.#o.armS * 1000);
      this.olderCursor = page.next_cursor;
    } catch (e) {
      if (this.conversationId !== conversationId) return;
      if (e instanceof RestError && e.unreachable) {
        this.#reloadAfterReconnect = true;
        this.#disconnected();
        return;
      }
      const detail = e instanceof RestError ? e.detail || e.code : e instanceof Error ? e.message : String(e);
      this.error = { kind: "history", code: e instanceof RestError ? e.code : "INTERNAL",
                     text: this.words.historyFailed(detail), retryable: true };
      this.state = "error";
      return;
    }
    this.state = this.card?.status === "pending" ? "awaiting_confirmation" : "idle";
    if (active) this.#applyActive(active);
    // A reloaded tab follows the run still going on (docs/protocol.md §4: /active's `run`).
    if (active?.run?.status === "running" && !this.gated) {
      const item = this.#newAssistant();
      void this.#run(this.#joinPayload(active.run.run_id, 0, conversationId), item, "join", "");
    }
  }

  /** The history page before the oldest shown (the log scrolled to its top), prepended. */
  async loadOlder(): Promise<void> {
    const cid = this.conversationId;
    const cursor = this.olderCursor;
    if (!cid || !cursor || this.loadingOlder || this.state === "loading_history") return;
    this.loadingOlder = true;
    try {
      const page = await deadline(this.#o.rest.history(cid, HISTORY_PAGE, cursor), 3 * HANG_MS);
      if (this.conversationId !== cid || this.olderCursor !== cursor) return;
      const seen = new Set(this.items.map((i) => i.id));
      const older = fromHistory(page.items, Date.now(), this.#o.armS * 1000).filter((i) => !seen.has(i.id));
      this.items.unshift(...older);
      this.olderCursor = page.next_cursor;
    } catch {
      // the next scroll to the top asks again
    } finally {
      this.loadingOlder = false;
    }
  }

  // -- the stream ---------------------------------------------------------------------------

  /** One event of the current submit (the event is the model's own copy). */
  onStreamData(ev: ChatEvent, cur: Current): void {
    const m = ev.metadata;
    if (m.type === "heartbeat") return; // the stream is alive (#run noted when): nothing to show
    if (m.run_id) {
      if (m.run_id !== cur.runId) {
        cur.runId = m.run_id;
        cur.lastSeq = 0;
      }
      if (m.type === "run_resumed" && Number(m.attempt) > (cur.attempt ?? 1)) {
        // Another replica took the run over from its last stored event (`after_seq`): what
        // this tab holds beyond it was never stored. Seq goes on from there (docs/protocol.md §2).
        cur.attempt = Number(m.attempt);
        cur.lastSeq = Math.min(cur.lastSeq, m.seq - 1);
      }
      if (m.seq <= cur.lastSeq) return; // Gradio delivers the last value twice
      cur.lastSeq = m.seq;
      if (cur.kind !== "join" && !this.#ownRuns.has(m.run_id)) {
        this.#ownRuns.add(m.run_id);
        this.#o.ownRuns?.save([...this.#ownRuns].slice(-20));
      }
    } else {
      if (m.seq <= cur.nullSeq) return;
      cur.nullSeq = m.seq;
    }
    if (m.conversation_id && this.conversationId !== m.conversation_id && cur.kind !== "join") {
      const fresh = this.conversationId === null;
      this.conversationId = m.conversation_id;
      if (fresh) this.#o.onConversationsChanged?.();
    }
    const item = cur.item;
    switch (m.type) {
      case "stream_token":
        appendText(item, m.run_id, String(m.token ?? ""));
        return;
      case "run_resumed":
        // The answer starts again on the new replica: the run's partial text goes.
        item.parts = item.parts.filter((p) => !(p.kind === "text" && p.runId === m.run_id));
        return;
      case "tool_start":
        item.parts.push(newTool(m));
        return;
      case "tool_end":
        upsertTool(item, m, (t) => { t.status = "done"; t.output = m.output ?? null; });
        return;
      case "tool_retry":
        upsertTool(item, m, (t) => {
          t.status = "retrying"; t.attempt = Number(m.attempt); t.maxAttempts = Number(m.max_attempts);
        });
        return;
      case "tool_error":
        upsertTool(item, m, (t) => {
          t.status = "error"; t.error = String(m.error ?? ""); t.retryable = m.retryable === true;
        });
        return;
      case "tool_timeout":
        upsertTool(item, m, (t) => {
          t.status = "timeout"; t.timeoutSeconds = Number(m.timeout_seconds); t.retryable = m.retryable !== false;
        });
        return;
      case "confirm_required":
        item.parts.push(cardFrom(m, ev.content, Date.now(), this.#o.armS * 1000));
        cur.terminal = true;
        this.now = Date.now();
        this.state = "awaiting_confirmation";
        return;
      case "confirm_resolved": {
        const card = findCard(this.items, String(m.confirm_id));
        if (card) {
          card.status = m.result === "confirmed" ? "confirmed" : m.result === "expired" ? "expired" : "denied";
          card.answering = false;
          if (card.status === "denied" && !card.permissionGranted && card.alternatives.length) {
            cur.deniedAlternatives = card.alternatives;
          }
        }
        return;
      }
      case "forked":
        // An edit's or a regenerate's first event (docs/protocol.md §4, "Branches"); history
        // shows the new branch with its alternatives once the answer is in.
        return;
      case "error":
        cur.terminal = true;
        this.#streamError(ev, cur);
        return;
      default:
        if (m.message_id === undefined) return; // a type this panel does not know yet
        cur.terminal = true;
        finalText(item, m.run_id, ev.content);
        if (cur.deniedAlternatives) item.parts.push({ kind: "alternatives", alternatives: cur.deniedAlternatives });
        this.state = "idle";
        this.#o.onConversationsChanged?.();
        // A fork's answer: history has the new branch's ids and its alternatives.
        if (cur.kind === "fork" && this.conversationId) void this.openConversation(this.conversationId);
    }
  }

  async #run(payload: ChatPayload, item: AssistantItem, kind: Current["kind"], text: string): Promise<void> {
    const cur: Current = {
      kind, item, text, runId: payload.message.run_id ?? null, lastSeq: payload.message.last_seq ?? 0,
      nullSeq: 0, terminal: false, cancelled: false, deniedAlternatives: null, sub: null,
    };
    this.#cur = cur;
    this.error = null;
    this.state = "streaming";
    this.#lastDataAt = Date.now();
    try {
      cur.sub = await this.#o.transport.submit(payload);
      for await (const msg of cur.sub) {
        if (this.#cur !== cur) break;
        this.#lastDataAt = Date.now();
        if (msg.type === "data") {
          const data = (msg as { data: unknown[] }).data;
          // @gradio/client patches one object in place: keep a deep copy.
          this.onStreamData(structuredClone(data[0]) as ChatEvent, cur);
          if (cur.terminal) break;
        } else if (msg.type === "status") {
          const stage = (msg as { stage: string }).stage;
          if (stage === "error" || stage === "complete") break;
        }
      }
    } catch {
      // a connect or stream failure: handled below as a lost connection
    }
    if (this.#cur !== cur) return; // stopped, or replaced by another submit
    this.#cur = null;
    if (!cur.terminal) this.#lost(cur);
  }

  #streamError(ev: ChatEvent, cur: Current): void {
    const m = ev.metadata;
    const code = String(m.code ?? "INTERNAL");
    if (cur.kind === "join" && (code === "NO_RUN" || code === "JOIN_EXPIRED")) {
      // Nothing (more) to follow: what happened is in history.
      this.#cur = null;
      this.state = "idle";
      if (this.conversationId) void this.openConversation(this.conversationId);
      return;
    }
    for (const c of pendingCards(this.items)) c.answering = false;
    if (m.run_id === null && cur.kind === "fork" && this.#beforeFork) {
      // An edit or a regenerate refused (a card waits, a run is live): nothing changed.
      this.items = this.#beforeFork;
      this.error = { kind: "not_sent", code, text: ev.content, retryable: false };
    } else if (m.run_id === null && cur.kind === "message") {
      // Refused before a run existed (busy, rate limit, bad input): nothing was stored, so a
      // retry would re-run the previous turn. The text goes back to the input instead.
      dropTurn(this.items, cur.item);
      this.draft = cur.text;
      this.error = { kind: "not_sent", code, text: `${ev.content} ${this.words.notSent}`, retryable: false };
    } else {
      if (cur.item.parts.some((p) => p.kind === "text")) cur.item.partial = true;
      this.error = { kind: "stream", code, text: ev.content, retryable: m.retryable === true };
    }
    this.state = "error";
    if (code === "CONVERSATION_BUSY") this.gated = true;
    this.#o.onConversationsChanged?.();
  }

  /** The stream ended without its last event: the connection is gone (the run goes on). */
  #lost(cur: Current): void {
    for (const c of pendingCards(this.items)) c.answering = false;
    if (cur.runId && this.conversationId) {
      this.#rejoin = { runId: cur.runId, lastSeq: cur.lastSeq, conversationId: this.conversationId, item: cur.item };
    } else if (this.conversationId) {
      this.#reloadAfterReconnect = true; // lost before the first event: history will tell
    } else if (cur.kind === "message") {
      dropTurn(this.items, cur.item); // a new conversation that never started
      this.draft = cur.text;
    }
    this.#disconnected();
  }

  #disconnected(): void {
    this.connection = "disconnected";
    this.state = "disconnected";
    this.reconnect = { attempt: 1, secondsLeft: this.#o.reconnectDelayS };
  }

  async #tryReconnect(): Promise<void> {
    if (this.connection === "connecting") return;
    this.connection = "connecting";
    this.reconnect.secondsLeft = 0;
    try {
      const { examples } = await deadline(this.#o.transport.connect(), HANG_MS);
      if (examples.length) this.examples = examples;
    } catch {
      this.connection = "disconnected";
      const attempt = this.reconnect.attempt + 1;
      if (attempt > this.#o.reconnectAttempts) {
        this.state = "disconnected_permanent";
        this.reconnect = { attempt: this.#o.reconnectAttempts, secondsLeft: 0 };
      } else {
        this.state = "disconnected";
        this.reconnect = { attempt, secondsLeft: this.#o.reconnectDelayS };
      }
      return;
    }
    this.connection = "connected";
    this.reconnect = { attempt: 0, secondsLeft: 0 };
    this.state = "idle"; // disconnected ──[retry]──→ idle
    const rejoin = this.#rejoin;
    this.#rejoin = null;
    if (rejoin) {
      // The run went on meanwhile: follow it from the last event seen, same tab_id.
      void this.#run(this.#joinPayload(rejoin.runId, rejoin.lastSeq, rejoin.conversationId), rejoin.item, "join", "");
    } else if (this.#reloadAfterReconnect && this.conversationId) {
      this.#reloadAfterReconnect = false;
      void this.openConversation(this.conversationId);
    } else if (this.card?.status === "pending") {
      this.state = "awaiting_confirmation";
    }
    this.#o.onConversationsChanged?.();
  }

  // -- the clock ----------------------------------------------------------------------------

  #tick(): void {
    this.now = Date.now();
    const card = this.card;
    if (card?.status === "pending" && card.expiresAt <= this.now) {
      card.status = "expired"; // awaiting_confirmation ──[timeout 5min]──→ idle (expired)
      if (this.state === "awaiting_confirmation") this.state = "idle";
    }
    const cur = this.#cur;
    const silentMs = 2 * this.#o.heartbeatS * 1000;
    if (cur && this.state === "streaming" && silentMs > 0 && this.now - this.#lastDataAt > silentMs) {
      // Two heartbeats missed: the connection died without a word (a proxy, a sleep). The run
      // goes on server-side: never cancel it; leave this stream and rejoin from the last seq.
      this.#cur = null;
      this.#lost(cur);
      return;
    }
    if (this.state === "disconnected" && this.connection === "disconnected") {
      this.reconnect.secondsLeft -= 1;
      if (this.reconnect.secondsLeft <= 0) void this.#tryReconnect();
      return;
    }
    this.#ticks += 1;
    if (this.#ticks % this.#o.pollEveryS === 0) void this.#poll();
  }

  /** While no stream runs: the multi-tab gate from /active, and noticing a dead agent. */
  async #poll(): Promise<void> {
    const quiet = this.state === "idle" || this.state === "awaiting_confirmation" ||
      this.state === "error" && this.error?.kind !== "history";
    if (!quiet || this.connection !== "connected" || this.#polling) return;
    this.#polling = true;
    try {
      const cid = this.conversationId;
      if (cid) {
        try {
          const active = await deadline(this.#o.rest.active(cid), HANG_MS);
          if (this.conversationId === cid) this.#applyActive(active);
          return;
        } catch (e) {
          if (!(e instanceof RestError && e.unreachable)) return;
        }
      } else if (await deadline(this.#o.transport.probe(), HANG_MS).catch(() => false)) {
        return;
      }
      if (this.state === "idle" || this.state === "awaiting_confirmation" || this.state === "error") {
        this.#disconnected(); // 002: "Gradio disconnect | idle | Gradio dies | Dot red, 5×5s retry"
      }
    } finally {
      this.#polling = false;
    }
  }

  #applyActive(a: Active): void {
    // Our own lease (a run this tab started) is not a second tab.
    this.gated = a.active && !(a.run && this.#ownRuns.has(a.run.run_id));
    if (!this.gated && this.error?.code === "CONVERSATION_BUSY") {
      this.error = null;
      if (this.state === "error") this.state = "idle";
    }
  }

  // -- helpers ------------------------------------------------------------------------------

  #answer(action: "confirm" | "deny"): void {
    const card = this.card;
    if (!card || !this.canAnswer(card) || action === "confirm" && !this.canConfirm(card)) return;
    card.answering = true;
    const item = itemOf(this.items, card) ?? this.#newAssistant();
    const payload = this.#payload("__resume__", action);
    payload.message.confirm_id = card.confirmId;
    void this.#run(payload, item, "resume", "");
  }

  #payload(text: string, action: ChatPayload["action"]): ChatPayload {
    return {
      message: { text, files: [], tab_id: this.#o.tabId },
      action,
      conversation_id: this.conversationId,
      uicontext: action === null && this.#o.uicontext ? JSON.stringify(this.#o.uicontext) : null,
      env_id: this.#o.envId ?? null,
    };
  }

  #joinPayload(runId: string, lastSeq: number, conversationId: string): ChatPayload {
    return {
      message: { text: "", files: [], tab_id: this.#o.tabId, run_id: runId, last_seq: lastSeq },
      action: "join", conversation_id: conversationId, uicontext: null, env_id: null,
    };
  }

  /** Push an assistant item and return the reactive proxy the array holds. */
  #newAssistant(): AssistantItem {
    this.items.push({ kind: "assistant", id: id("a"), parts: [], partial: false });
    return this.items[this.items.length - 1] as AssistantItem;
  }
}
