/** The stream: a submit read to its end (`run`), each event a transition (`onStreamData`, the
 * reducer of docs/ux.md's table for `streaming`), the error event (`streamError`), and a stream
 * that ends without its last event (`lost`: the reconnect in clock.ts takes it from there).
 *
 *   run(payload) ─ for await ─▶ onStreamData(event) ─▶ the answer's parts, state, error
 *                                  └─ final ─▶ refreshStored(): history's ids on the items shown
 */

import { cardFrom } from "./cards.js";
import { adoptStored } from "./history.js";
import { type ChatState, type Current, type Inner, deadline, disconnected, HANG_MS, HISTORY_PAGE } from "./machine.js";
import { appendText, dropTurn, finalText, findCard, newTool, pendingCards, upsertTool } from "./parts.js";
import type { AssistantItem, ChatEvent, ChatPayload } from "./types.js";

/** A submit read to its end: its last event (final, card, error) or a lost connection. */
export async function run(model: ChatState, inner: Inner, payload: ChatPayload, item: AssistantItem,
                          kind: Current["kind"], text: string): Promise<void> {
  const cur: Current = {
    kind, item, text, runId: payload.message.run_id ?? null, lastSeq: payload.message.last_seq ?? 0,
    nullSeq: 0, terminal: false, cancelled: false, deniedAlternatives: null, sub: null,
  };
  inner.cur = cur;
  model.error = null;
  model.state = "streaming";
  inner.lastDataAt = Date.now();
  try {
    cur.sub = await inner.options.transport.submit(payload);
    for await (const msg of cur.sub) {
      if (inner.cur !== cur) break;
      inner.lastDataAt = Date.now();
      if (msg.type === "data") {
        const data = (msg as { data: unknown[] }).data;
        // @gradio/client patches one object in place: keep a deep copy.
        onStreamData(model, inner, structuredClone(data[0]) as ChatEvent, cur);
        if (cur.terminal) break;
      } else if (msg.type === "status") {
        const stage = (msg as { stage: string }).stage;
        if (stage === "error" || stage === "complete") break;
      }
    }
  } catch {
    // a connect or stream failure: handled below as a lost connection
  }
  if (inner.cur !== cur) return; // stopped, or replaced by another submit
  inner.cur = null;
  if (!cur.terminal) lost(model, inner, cur);
}

/** One event of the current submit (the event is the model's own copy). */
export function onStreamData(model: ChatState, inner: Inner, ev: ChatEvent, cur: Current): void {
  const meta = ev.metadata;
  if (meta.type === "heartbeat") return; // the stream is alive (run() noted when): nothing to show
  if (meta.run_id) {
    if (meta.run_id !== cur.runId) {
      cur.runId = meta.run_id;
      cur.lastSeq = 0;
    }
    if (meta.type === "run_resumed" && Number(meta.attempt) > (cur.attempt ?? 1)) {
      // Another replica took the run over from its last stored event (`after_seq`): what
      // this tab holds beyond it was never stored. Seq goes on from there (docs/protocol.md §2).
      cur.attempt = Number(meta.attempt);
      cur.lastSeq = Math.min(cur.lastSeq, meta.seq - 1);
    }
    if (meta.seq <= cur.lastSeq) return; // Gradio delivers the last value twice
    cur.lastSeq = meta.seq;
    if (cur.kind !== "join" && !inner.ownRuns.has(meta.run_id)) {
      inner.ownRuns.add(meta.run_id);
      inner.options.ownRuns?.save([...inner.ownRuns].slice(-20));
    }
  } else {
    if (meta.seq <= cur.nullSeq) return;
    cur.nullSeq = meta.seq;
  }
  if (meta.conversation_id && model.conversationId !== meta.conversation_id && cur.kind !== "join") {
    const fresh = model.conversationId === null;
    model.conversationId = meta.conversation_id;
    if (fresh) inner.options.onConversationsChanged?.();
  }
  const item = cur.item;
  switch (meta.type) {
    case "stream_token":
      appendText(item, meta.run_id, String(meta.token ?? ""));
      return;
    case "run_resumed":
      // The answer starts again on the new replica: the run's partial text goes.
      item.parts = item.parts.filter((p) => !(p.kind === "text" && p.runId === meta.run_id));
      return;
    case "tool_start":
      item.parts.push(newTool(meta));
      return;
    case "tool_end":
      upsertTool(item, meta, (t) => { t.status = "done"; t.output = meta.output ?? null; });
      return;
    case "tool_retry":
      upsertTool(item, meta, (t) => {
        t.status = "retrying"; t.attempt = Number(meta.attempt); t.maxAttempts = Number(meta.max_attempts);
      });
      return;
    case "tool_error":
      upsertTool(item, meta, (t) => {
        t.status = "error"; t.error = String(meta.error ?? ""); t.retryable = meta.retryable === true;
      });
      return;
    case "tool_timeout":
      upsertTool(item, meta, (t) => {
        t.status = "timeout"; t.timeoutSeconds = Number(meta.timeout_seconds); t.retryable = meta.retryable !== false;
      });
      return;
    case "confirm_required":
      item.parts.push(cardFrom(meta, ev.content, Date.now(), inner.options.armS * 1000));
      if (meta.approval) inner.approvalBase.set(String(meta.confirm_id), meta.run_id ?? null);
      cur.terminal = true;
      model.now = Date.now();
      model.state = "awaiting_confirmation";
      return;
    case "confirm_resolved": {
      const card = findCard(model.items, String(meta.confirm_id));
      if (card) {
        card.status = meta.result === "confirmed" ? "confirmed" : meta.result === "expired" ? "expired" : "denied";
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
      streamError(model, inner, ev, cur);
      return;
    default:
      if (meta.message_id === undefined) return; // a type this panel does not know yet
      cur.terminal = true;
      finalText(item, meta.run_id, ev.content);
      if (cur.deniedAlternatives) item.parts.push({ kind: "alternatives", alternatives: cur.deniedAlternatives });
      model.state = "idle";
      inner.options.onConversationsChanged?.();
      // A fork's answer: history has the new branch's ids and its alternatives. Any other:
      // the turn's ids, quietly (docs/protocol.md §4: its edit and regenerate buttons without a reload).
      if (cur.kind === "fork" && model.conversationId) void inner.openConversation(model.conversationId);
      else if (typeof meta.message_id === "string") void refreshStored(model, inner, cur, meta.message_id);
  }
}

/** History's newest page after a turn's final, read quietly: no loading state, the items stay
 * (only what `adoptStored` matches gains its stored id and buttons). A page that comes back
 * after the view moved on (another conversation, a new submit) is dropped. */
async function refreshStored(model: ChatState, inner: Inner, cur: Current, answerId: string): Promise<void> {
  const cid = model.conversationId;
  const lastId = model.items.at(-1)?.id;
  if (!cid) return;
  try {
    const page = await deadline(inner.options.rest.history(cid, HISTORY_PAGE), 3 * HANG_MS);
    if (model.conversationId !== cid || inner.cur && inner.cur !== cur || model.items.at(-1)?.id !== lastId) return;
    adoptStored(model.items, page.items, answerId);
  } catch {
    // the buttons come with the next load of history
  }
}

/** The error event: a join with nothing left to follow reads history, a submit refused before
 * its run is undone, a failed run keeps its partial answer. */
function streamError(model: ChatState, inner: Inner, ev: ChatEvent, cur: Current): void {
  const meta = ev.metadata;
  const code = String(meta.code ?? "INTERNAL");
  if (cur.kind === "join" && (code === "NO_RUN" || code === "JOIN_EXPIRED")) {
    // Nothing (more) to follow: what happened is in history.
    inner.cur = null;
    model.state = "idle";
    if (model.conversationId) void inner.openConversation(model.conversationId);
    return;
  }
  for (const c of pendingCards(model.items)) c.answering = false;
  if (meta.run_id === null && cur.kind === "fork" && inner.beforeFork) {
    // An edit or a regenerate refused (a card waits, a run is live): nothing changed.
    model.items = inner.beforeFork;
    model.error = { kind: "not_sent", code, text: ev.content, retryable: false };
  } else if (meta.run_id === null && cur.kind === "message") {
    // Refused before a run existed (busy, rate limit, bad input): nothing was stored, so a
    // retry would re-run the previous turn. The text goes back to the input instead.
    dropTurn(model.items, cur.item);
    model.draft = cur.text;
    model.error = { kind: "not_sent", code, text: `${ev.content} ${model.words.notSent}`, retryable: false };
  } else {
    if (cur.item.parts.some((p) => p.kind === "text")) cur.item.partial = true;
    model.error = { kind: "stream", code, text: ev.content, retryable: meta.retryable === true };
  }
  model.state = "error";
  if (code === "CONVERSATION_BUSY") model.gated = true;
  inner.options.onConversationsChanged?.();
}

/** The stream ended without its last event: the connection is gone (the run goes on). */
export function lost(model: ChatState, inner: Inner, cur: Current): void {
  for (const c of pendingCards(model.items)) c.answering = false;
  if (cur.runId && model.conversationId) {
    inner.rejoin = { runId: cur.runId, lastSeq: cur.lastSeq, conversationId: model.conversationId, item: cur.item };
  } else if (model.conversationId) {
    inner.reloadAfterReconnect = true; // lost before the first event: history will tell
  } else if (cur.kind === "message") {
    dropTurn(model.items, cur.item); // a new conversation that never started
    model.draft = cur.text;
  }
  disconnected(model, inner);
}
