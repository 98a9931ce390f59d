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

import type { ChatModel } from "./chat.svelte.js";
import { type Inner, deadline, disconnected, HANG_MS, joinPayload, newAssistant } from "./machine.js";
import { itemOf } from "./parts.js";
import { lost, run } from "./stream.js";
import { type Active, RestError } from "./types.js";

export class Clock {
  readonly #m: ChatModel;
  readonly #k: Inner;
  #ticker: ReturnType<typeof setInterval> | null = null;
  #ticks = 0;
  #polling = false;

  constructor(m: ChatModel, k: Inner) {
    this.#m = m;
    this.#k = k;
  }

  start(): void {
    this.#ticker ??= setInterval(() => this.#tick(), 1000);
  }

  stop(): void {
    if (this.#ticker) clearInterval(this.#ticker);
    this.#ticker = null;
  }

  async tryReconnect(): Promise<void> {
    const m = this.#m;
    const k = this.#k;
    if (m.connection === "connecting") return;
    m.connection = "connecting";
    m.reconnect.secondsLeft = 0;
    try {
      const { examples } = await deadline(k.o.transport.connect(), HANG_MS);
      if (examples.length) m.examples = examples;
    } catch {
      m.connection = "disconnected";
      const attempt = m.reconnect.attempt + 1;
      if (attempt > k.o.reconnectAttempts) {
        m.state = "disconnected_permanent";
        m.reconnect = { attempt: k.o.reconnectAttempts, secondsLeft: 0 };
      } else {
        m.state = "disconnected";
        m.reconnect = { attempt, secondsLeft: k.o.reconnectDelayS };
      }
      return;
    }
    m.connection = "connected";
    m.reconnect = { attempt: 0, secondsLeft: 0 };
    m.state = "idle"; // disconnected ──[retry]──→ idle
    const rejoin = k.rejoin;
    k.rejoin = null;
    if (rejoin) {
      // The run went on meanwhile: follow it from the last event seen, same tab_id.
      void run(m, k, joinPayload(k, rejoin.runId, rejoin.lastSeq, rejoin.conversationId), rejoin.item, "join", "");
    } else if (k.reloadAfterReconnect && m.conversationId) {
      k.reloadAfterReconnect = false;
      void m.openConversation(m.conversationId);
    } else if (m.card?.status === "pending") {
      m.state = "awaiting_confirmation";
    }
    k.o.onConversationsChanged?.();
  }

  #tick(): void {
    const m = this.#m;
    const k = this.#k;
    m.now = Date.now();
    const card = m.card;
    if (card?.status === "pending" && card.expiresAt <= m.now) {
      card.status = "expired"; // awaiting_confirmation ──[timeout 5min]──→ idle (expired)
      if (m.state === "awaiting_confirmation") m.state = "idle";
    }
    const cur = k.cur;
    const silentMs = 2 * k.o.heartbeatS * 1000;
    if (cur && m.state === "streaming" && silentMs > 0 && m.now - k.lastDataAt > silentMs) {
      // Two heartbeats missed: the connection died without a word (a proxy, a sleep). The run
      // goes on server-side: never cancel it; leave this stream and rejoin from the last seq.
      k.cur = null;
      lost(m, k, cur);
      return;
    }
    if (m.state === "disconnected" && m.connection === "disconnected") {
      m.reconnect.secondsLeft -= 1;
      if (m.reconnect.secondsLeft <= 0) void this.tryReconnect();
      return;
    }
    this.#ticks += 1;
    if (this.#ticks % k.o.pollEveryS === 0) void this.#poll();
  }

  /** While no stream runs: the multi-tab gate from /active, and noticing a dead agent. */
  async #poll(): Promise<void> {
    const m = this.#m;
    const k = this.#k;
    const quiet = m.state === "idle" || m.state === "awaiting_confirmation" ||
      m.state === "error" && m.error?.kind !== "history";
    if (!quiet || m.connection !== "connected" || this.#polling) return;
    this.#polling = true;
    try {
      const cid = m.conversationId;
      if (cid) {
        try {
          const active = await deadline(k.o.rest.active(cid), HANG_MS);
          if (m.conversationId === cid) applyActive(m, k, active);
          return;
        } catch (e) {
          if (!(e instanceof RestError && e.unreachable)) return;
        }
      } else if (await deadline(k.o.transport.probe(), HANG_MS).catch(() => false)) {
        return;
      }
      if (m.state === "idle" || m.state === "awaiting_confirmation" || m.state === "error") {
        disconnected(m, k); // 002: "Gradio disconnect | idle | Gradio dies | Dot red, 5×5s retry"
      }
    } finally {
      this.#polling = false;
    }
  }
}

/** `/active` (docs/protocol.md §4, "Multi-tab gate"): another tab's lease disables Send; a
 * card someone else approves is followed into the run the approval started. True when it
 * started following that run (or reloading history for it). */
export function applyActive(m: ChatModel, k: Inner, a: Active): boolean {
  const card = m.card;
  const cid = m.conversationId;
  if (card?.approval && card.status === "pending" && m.state === "awaiting_confirmation" && cid) {
    // Someone else's approval resumes this turn as a new run (docs/protocol.md §11): the
    // requester's tab follows it live from its first event (its confirm_resolved settles the
    // card), or, when it already ended, reads history.
    const newest = a.run?.run_id ?? null;
    const base = k.approvalBase.get(card.confirmId);
    if (base === undefined) {
      k.approvalBase.set(card.confirmId, newest); // shown from history: what was newest then
    } else if (a.run && newest !== base && !k.ownRuns.has(a.run.run_id)) {
      k.approvalBase.delete(card.confirmId);
      m.gated = false;
      if (a.run.status !== "running") {
        void m.openConversation(cid);
        return true;
      }
      const item = itemOf(m.items, card) ?? newAssistant(m);
      void run(m, k, joinPayload(k, a.run.run_id, 0, cid), item, "join", "");
      return true;
    }
  }
  // Our own lease (a run this tab started) is not a second tab.
  m.gated = a.active && !(a.run && k.ownRuns.has(a.run.run_id));
  if (!m.gated && m.error?.code === "CONVERSATION_BUSY") {
    m.error = null;
    if (m.state === "error") m.state = "idle";
  }
  return false;
}
