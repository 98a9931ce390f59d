/** The stream: a submit read to its end (`run`), each event a transition (`onStreamData`, the
 * reducer of docs/ux.md's table for `streaming`), the error event (`streamError`), and a stream
 * that ends without its last event (`lost`: the reconnect in clock.ts takes it from there).
 *
 *   run(payload) ─ for await ─▶ onStreamData(event) ─▶ the answer's parts, state, error
 *                                  └─ final ─▶ refreshStored(): history's ids on the items shown
 */

import { cardFrom } from "./cards.js";
import type { ChatModel } from "./chat.svelte.js";
import { adoptStored } from "./history.js";
import { type Current, type Inner, deadline, disconnected, HANG_MS, HISTORY_PAGE } from "./machine.js";
import { appendText, dropTurn, finalText, findCard, newTool, pendingCards, upsertTool } from "./parts.js";
import type { AssistantItem, ChatEvent, ChatPayload } from "./types.js";

/** A submit read to its end: its last event (final, card, error) or a lost connection. */
export async function run(model: ChatModel, k: Inner, payload: ChatPayload, item: AssistantItem,
                          kind: Current["kind"], text: string): Promise<void> {
  const cur: Current = {
    kind, item, text, runId: payload.message.run_id ?? null, lastSeq: payload.message.last_seq ?? 0,
    nullSeq: 0, terminal: false, cancelled: false, deniedAlternatives: null, sub: null,
  };
  k.cur = cur;
  model.error = null;
  model.state = "streaming";
  k.lastDataAt = Date.now();
  try {
    cur.sub = await k.o.transport.submit(payload);
    for await (const msg of cur.sub) {
      if (k.cur !== cur) break;
      k.lastDataAt = Date.now();
      if (msg.type === "data") {
        const data = (msg as { data: unknown[] }).data;
        // @gradio/client patches one object in place: keep a deep copy.
        onStreamData(model, k, structuredClone(data[0]) as ChatEvent, cur);
        if (cur.terminal) break;
      } else if (msg.type === "status") {
        const stage = (msg as { stage: string }).stage;
        if (stage === "error" || stage === "complete") break;
      }
    }
  } catch {
    // a connect or stream failure: handled below as a lost connection
  }
  if (k.cur !== cur) return; // stopped, or replaced by another submit
  k.cur = null;
  if (!cur.terminal) lost(model, k, cur);
}

/** One event of the current submit (the event is the model's own copy). */
export function onStreamData(model: ChatModel, k: Inner, ev: ChatEvent, cur: Current): void {
  const m = ev.metadata;
  if (m.type === "heartbeat") return; // the stream is alive (run() noted when): nothing to show
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
    if (cur.kind !== "join" && !k.ownRuns.has(m.run_id)) {
      k.ownRuns.add(m.run_id);
      k.o.ownRuns?.save([...k.ownRuns].slice(-20));
    }
  } else {
    if (m.seq <= cur.nullSeq) return;
    cur.nullSeq = m.seq;
  }
  if (m.conversation_id && model.conversationId !== m.conversation_id && cur.kind !== "join") {
    const fresh = model.conversationId === null;
    model.conversationId = m.conversation_id;
    if (fresh) k.o.onConversationsChanged?.();
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
      item.parts.push(cardFrom(m, ev.content, Date.now(), k.o.armS * 1000));
      if (m.approval) k.approvalBase.set(String(m.confirm_id), m.run_id ?? null);
      cur.terminal = true;
      model.now = Date.now();
      model.state = "awaiting_confirmation";
      return;
    case "confirm_resolved": {
      const card = findCard(model.items, String(m.confirm_id));
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
      streamError(model, k, ev, cur);
      return;
    default:
      if (m.message_id === undefined) return; // a type this panel does not know yet
      cur.terminal = true;
      finalText(item, m.run_id, ev.content);
      if (cur.deniedAlternatives) item.parts.push({ kind: "alternatives", alternatives: cur.deniedAlternatives });
      model.state = "idle";
      k.o.onConversationsChanged?.();
      // A fork's answer: history has the new branch's ids and its alternatives. Any other:
      // the turn's ids, quietly (issue 35: its edit and regenerate buttons without a reload).
      if (cur.kind === "fork" && model.conversationId) void model.openConversation(model.conversationId);
      else if (typeof m.message_id === "string") void refreshStored(model, k, cur, m.message_id);
  }
}

/** History's newest page after a turn's final, read quietly: no loading state, the items stay
 * (only what `adoptStored` matches gains its stored id and buttons). A page that comes back
 * after the view moved on (another conversation, a new submit) is dropped. */
async function refreshStored(model: ChatModel, k: Inner, cur: Current, answerId: string): Promise<void> {
  const cid = model.conversationId;
  const lastId = model.items.at(-1)?.id;
  if (!cid) return;
  try {
    const page = await deadline(k.o.rest.history(cid, HISTORY_PAGE), 3 * HANG_MS);
    if (model.conversationId !== cid || k.cur && k.cur !== cur || model.items.at(-1)?.id !== lastId) return;
    adoptStored(model.items, page.items, answerId);
  } catch {
    // the buttons come with the next load of history
  }
}

/** The error event: a join with nothing left to follow reads history, a submit refused before
 * its run is undone, a failed run keeps its partial answer. */
function streamError(model: ChatModel, k: Inner, ev: ChatEvent, cur: Current): void {
  const m = ev.metadata;
  const code = String(m.code ?? "INTERNAL");
  if (cur.kind === "join" && (code === "NO_RUN" || code === "JOIN_EXPIRED")) {
    // Nothing (more) to follow: what happened is in history.
    k.cur = null;
    model.state = "idle";
    if (model.conversationId) void model.openConversation(model.conversationId);
    return;
  }
  for (const c of pendingCards(model.items)) c.answering = false;
  if (m.run_id === null && cur.kind === "fork" && k.beforeFork) {
    // An edit or a regenerate refused (a card waits, a run is live): nothing changed.
    model.items = k.beforeFork;
    model.error = { kind: "not_sent", code, text: ev.content, retryable: false };
  } else if (m.run_id === null && cur.kind === "message") {
    // Refused before a run existed (busy, rate limit, bad input): nothing was stored, so a
    // retry would re-run the previous turn. The text goes back to the input instead.
    dropTurn(model.items, cur.item);
    model.draft = cur.text;
    model.error = { kind: "not_sent", code, text: `${ev.content} ${model.words.notSent}`, retryable: false };
  } else {
    if (cur.item.parts.some((p) => p.kind === "text")) cur.item.partial = true;
    model.error = { kind: "stream", code, text: ev.content, retryable: m.retryable === true };
  }
  model.state = "error";
  if (code === "CONVERSATION_BUSY") model.gated = true;
  k.o.onConversationsChanged?.();
}

/** The stream ended without its last event: the connection is gone (the run goes on). */
export function lost(model: ChatModel, k: Inner, cur: Current): void {
  for (const c of pendingCards(model.items)) c.answering = false;
  if (cur.runId && model.conversationId) {
    k.rejoin = { runId: cur.runId, lastSeq: cur.lastSeq, conversationId: model.conversationId, item: cur.item };
  } else if (model.conversationId) {
    k.reloadAfterReconnect = true; // lost before the first event: history will tell
  } else if (cur.kind === "message") {
    dropTurn(model.items, cur.item); // a new conversation that never started
    model.draft = cur.text;
  }
  disconnected(model, k);
}
