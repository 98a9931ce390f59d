/** The clock: one tick a second drives every timed transition of docs/ux.md's table.
 *
 *   tick ─▶ card expiry (awaiting_confirmation ──[timeout]──→ idle)
 *        ─▶ the stream's watchdog (2 missed heartbeats: lost, stream.ts)
 *        ─▶ the reconnect countdown (5 × 5 s, then disconnected_permanent) ─▶ tryReconnect()
 *        ─▶ every pollEveryS: poll() (/active for the multi-tab gate, else a liveness probe)
 *
 * A reconnect follows what the lost stream left (`Inner.rejoin`: the run, from its last seq)
 * or reloads history.
 */

import { type ChatState, type Inner, deadline, disconnected, HANG_MS, joinPayload, newAssistant } from "./machine.js";
import { itemOf } from "./parts.js";
import { lost, run } from "./stream.js";
import { type Active, RestError } from "./types.js";

export class Clock {
  readonly #model: ChatState;
  readonly #inner: Inner;
  #ticker: ReturnType<typeof setInterval> | null = null;
  #ticks = 0;
  #polling = false;

  constructor(model: ChatState, inner: Inner) {
    this.#model = model;
    this.#inner = inner;
  }

  start(): void {
    this.#ticker ??= setInterval(() => this.#tick(), 1000);
  }

  stop(): void {
    if (this.#ticker) clearInterval(this.#ticker);
    this.#ticker = null;
  }

  async tryReconnect(): Promise<void> {
    const model = this.#model;
    const inner = this.#inner;
    if (model.connection === "connecting") return;
    model.connection = "connecting";
    model.reconnect.secondsLeft = 0;
    try {
      const { examples } = await deadline(inner.options.transport.connect(), HANG_MS);
      if (examples.length) model.examples = examples;
    } catch {
      model.connection = "disconnected";
      const attempt = model.reconnect.attempt + 1;
      if (attempt > inner.options.reconnectAttempts) {
        model.state = "disconnected_permanent";
        model.reconnect = { attempt: inner.options.reconnectAttempts, secondsLeft: 0 };
      } else {
        model.state = "disconnected";
        model.reconnect = { attempt, secondsLeft: inner.options.reconnectDelayS };
      }
      return;
    }
    model.connection = "connected";
    model.reconnect = { attempt: 0, secondsLeft: 0 };
    model.state = "idle"; // disconnected ──[retry]──→ idle
    const rejoin = inner.rejoin;
    inner.rejoin = null;
    if (rejoin) {
      // The run went on meanwhile: follow it from the last event seen, same tab_id.
      void run(model, inner, joinPayload(inner, rejoin.runId, rejoin.lastSeq, rejoin.conversationId), rejoin.item, "join", "");
    } else if (inner.reloadAfterReconnect && model.conversationId) {
      inner.reloadAfterReconnect = false;
      void inner.openConversation(model.conversationId);
    } else if (model.card?.status === "pending") {
      model.state = "awaiting_confirmation";
    }
    inner.options.onConversationsChanged?.();
  }

  #tick(): void {
    const model = this.#model;
    const inner = this.#inner;
    model.now = Date.now();
    const card = model.card;
    if (card?.status === "pending" && card.expiresAt <= model.now) {
      card.status = "expired"; // awaiting_confirmation ──[timeout 5min]──→ idle (expired)
      if (model.state === "awaiting_confirmation") model.state = "idle";
    }
    const cur = inner.cur;
    const silentMs = 2 * inner.options.heartbeatS * 1000;
    if (cur && model.state === "streaming" && silentMs > 0 && model.now - inner.lastDataAt > silentMs) {
      // Two heartbeats missed: the connection died without a word (a proxy, a sleep). The run
      // goes on server-side: never cancel it; leave this stream and rejoin from the last seq.
      inner.cur = null;
      lost(model, inner, cur);
      return;
    }
    if (model.state === "disconnected" && model.connection === "disconnected") {
      model.reconnect.secondsLeft -= 1;
      if (model.reconnect.secondsLeft <= 0) void this.tryReconnect();
      return;
    }
    this.#ticks += 1;
    if (this.#ticks % inner.options.pollEveryS === 0) void this.#poll();
  }

  /** While no stream runs: the multi-tab gate from /active, and noticing a dead agent. */
  async #poll(): Promise<void> {
    const model = this.#model;
    const inner = this.#inner;
    const quiet = model.state === "idle" || model.state === "awaiting_confirmation" ||
      model.state === "error" && model.error?.kind !== "history";
    if (!quiet || model.connection !== "connected" || this.#polling) return;
    this.#polling = true;
    try {
      const cid = model.conversationId;
      if (cid) {
        try {
          const active = await deadline(inner.options.rest.active(cid), HANG_MS);
          if (model.conversationId === cid) applyActive(model, inner, active);
          return;
        } catch (e) {
          if (!(e instanceof RestError && e.unreachable)) return;
        }
      } else if (await deadline(inner.options.transport.probe(), HANG_MS).catch(() => false)) {
        return;
      }
      if (model.state === "idle" || model.state === "awaiting_confirmation" || model.state === "error") {
        disconnected(model, inner); // 002: "Gradio disconnect | idle | Gradio dies | Dot red, 5×5s retry"
      }
    } finally {
      this.#polling = false;
    }
  }
}

/** `/active` (docs/protocol.md §4, "Multi-tab gate"): another tab's lease disables Send; a
 * card someone else approves is followed into the run the approval started. True when it
 * started following that run (or reloading history for it). */
export function applyActive(model: ChatState, inner: Inner, a: Active): boolean {
  const card = model.card;
  const cid = model.conversationId;
  if (card?.approval && card.status === "pending" && model.state === "awaiting_confirmation" && cid) {
    // Someone else's approval resumes this turn as a new run (docs/protocol.md §11): the
    // requester's tab follows it live from its first event (its confirm_resolved settles the
    // card), or, when it already ended, reads history.
    const newest = a.run?.run_id ?? null;
    const base = inner.approvalBase.get(card.confirmId);
    if (base === undefined) {
      inner.approvalBase.set(card.confirmId, newest); // shown from history: what was newest then
    } else if (a.run && newest !== base && !inner.ownRuns.has(a.run.run_id)) {
      inner.approvalBase.delete(card.confirmId);
      model.gated = false;
      if (a.run.status !== "running") {
        void inner.openConversation(cid);
        return true;
      }
      const item = itemOf(model.items, card) ?? newAssistant(model);
      void run(model, inner, joinPayload(inner, a.run.run_id, 0, cid), item, "join", "");
      return true;
    }
  }
  // Our own lease (a run this tab started) is not a second tab.
  model.gated = a.active && !(a.run && inner.ownRuns.has(a.run.run_id));
  if (!model.gated && model.error?.code === "CONVERSATION_BUSY") {
    model.error = null;
    if (model.state === "error") model.state = "idle";
  }
  return false;
}
