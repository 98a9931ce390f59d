// docs/ux.md's states and recovery table, driven by event sequences recorded from the real
// stack (tests/record/). Each test names the transition it proves.
import { describe, expect, it, vi } from "vitest";
import { ChatModel } from "../src/lib/model/chat.svelte.js";
import type { AssistantItem, HistoryMessage, StreamMessage, TextView, ToolView } from "../src/lib/model/types.js";
import { fixture, unreachable, type Fixture } from "./fake.js";
import { settle, useModel } from "./harness.js";

const msgs = (f: Fixture, i = 0): StreamMessage[] => f.submits[i]!.messages;
const dataOf = (f: Fixture, i = 0) =>
  msgs(f, i).filter((m) => m.type === "data").map((m) => (m as { data: { content: string; metadata: Record<string, unknown> }[] }).data[0]!);
const lastAssistant = (m: ChatModel) => m.items.filter((i): i is AssistantItem => i.kind === "assistant").at(-1)!;
const text = (item: AssistantItem) => item.parts.filter((p): p is TextView => p.kind === "text").map((p) => p.text).join("");
const tools = (item: AssistantItem) => item.parts.filter((p): p is ToolView => p.kind === "tool");
const cardTime = (f: Fixture, i = 0): number => {
  const card = dataOf(f, i).find((e) => e.metadata.type === "confirm_required")!;
  return Date.parse(String(card.metadata.expires_at)) - 300_000 + 500;
};

const h = useModel();

describe("idle → streaming → idle", () => {
  it("happy path: tokens appear, the final message ends the stream (repeat dropped)", async () => {
    const f = await fixture("happy");
    h.transport.queue({ messages: msgs(f) });
    await h.started();
    expect(h.model.state).toBe("idle");
    expect(h.model.connection).toBe("connected");
    expect(h.model.isNew).toBe(true);
    expect(h.model.examples).toContain("Найди дашборды про энергопотребление");
    h.model.send("привет");
    expect(h.model.state).toBe("streaming");
    expect(h.model.busy).toBe(true);
    expect(h.model.inputLocked).toBe(true);
    await settle();
    expect(h.model.state).toBe("idle");
    const fin = dataOf(f).at(-1)!;
    expect(text(lastAssistant(h.model))).toBe(fin.content);
    expect(h.model.items.map((i) => i.kind)).toEqual(["user", "assistant"]);
    expect(h.model.conversationId).toBe(fin.metadata.conversation_id);
    const p = h.transport.payloads[0]!;
    expect(p).toMatchObject({ action: null, conversation_id: null, message: { text: "привет", tab_id: "tab-1" } });
  });

  it("keeps copies: the client's in-place patching does not rewrite past events", async () => {
    const f = await fixture("tool");
    h.transport.queue({ messages: msgs(f) });
    await h.started();
    h.model.send("найди дашборды про энергопотребление");
    await settle();
    const [t] = tools(lastAssistant(h.model));
    expect(t).toMatchObject({ status: "done", title: "Поиск дашбордов", tool: "search_dashboards" });
    expect(t!.input).toEqual(dataOf(f).find((e) => e.metadata.type === "tool_start")!.metadata.input);
    expect(text(lastAssistant(h.model))).toBe(dataOf(f).at(-1)!.content);
  });

  it("keeps copies of nested values too: two calls in one run keep their own inputs", async () => {
    const f = await fixture("tool");
    // The recorded run with a second call of the same tool started right after the first one
    // (both running at once): the client then patches the first call's `input` object in place.
    const all = msgs(f);
    const typeAt = (m: StreamMessage) => m.type === "data" ? (m as { data: { metadata: { type?: string } }[] }).data[0]!.metadata.type : undefined;
    const i = all.findIndex((m) => typeAt(m) === "tool_start");
    const j = all.findIndex((m) => typeAt(m) === "tool_end");
    const second = structuredClone([all[i]!, all[j]!]);
    for (const m of second) {
      const meta = (m as { data: { metadata: Record<string, unknown> }[] }).data[0]!.metadata;
      meta.call_id = "call_second";
      if (meta.input) meta.input = { query: "продажи", env_id: "prod" };
    }
    let seq = 100;
    const renumber = (list: StreamMessage[]) => list.map((m) => {
      if (m.type !== "data") return m;
      const c = structuredClone(m) as { type: "data"; data: { metadata: { seq: number } }[] };
      c.data[0]!.metadata.seq = ++seq;
      return c;
    });
    h.transport.queue({ messages: renumber([...all.slice(0, i + 1), second[0]!, all[j]!, second[1]!, ...all.slice(j + 1)]) });
    await h.started();
    h.model.send("найди дашборды про энергопотребление");
    await settle();
    const [a, b] = tools(lastAssistant(h.model));
    expect(a!.input).toEqual({ query: "энергопотребление", env_id: "ss-dev" });
    expect(b!.input).toEqual({ query: "продажи", env_id: "prod" });
  });

  it("a repeated seq is dropped (Gradio delivers a value twice)", async () => {
    const f = await fixture("cancel");
    const all = msgs(f);
    const k = all.findIndex((m) => m.type === "data");
    h.transport.queue({ messages: [...all.slice(0, k + 1), all[k]!, ...all.slice(k + 1)], hang: true });
    await h.started();
    h.model.send("привет and echo 60 words");
    await settle();
    expect(text(lastAssistant(h.model))).toBe(dataOf(f).at(-1)!.content);
  });

  it("run_resumed (another replica took the run over): the run's partial text is cleared, seq goes on from after_seq", async () => {
    const f = await fixture("cancel");
    const all = msgs(f);
    const k = all.findIndex((m) => m.type === "data");
    type Data = { type: "data"; data: { content: string; metadata: Record<string, unknown> }[] };
    const data = all.filter((m): m is Data => m.type === "data" && (m as Data).data[0]!.metadata.type === "stream_token");
    // The tab saw seq 1..3; the dead replica had stored 1..2: the new owner goes on at seq 3.
    const resumed = structuredClone(data[0]!);
    resumed.data[0] = { content: "", metadata: { ...resumed.data[0]!.metadata, type: "run_resumed", seq: 3, attempt: 2, after_seq: 2 } };
    delete resumed.data[0].metadata.token;
    const again = structuredClone(data[0]!);
    again.data[0]!.metadata.seq = 4;
    h.transport.queue({ messages: [...all.slice(0, k), data[0]!, data[1]!, data[2]!, resumed, again], hang: true });
    await h.started();
    h.model.send("привет and echo 60 words");
    await settle();
    expect(text(lastAssistant(h.model))).toBe(again.data[0]!.content);
  });

  it("a second message goes to the same conversation", async () => {
    const f = await fixture("happy");
    h.transport.queue({ messages: msgs(f) }, { messages: msgs(f) });
    await h.started();
    h.model.send("привет");
    await settle();
    h.model.send("ещё раз");
    await settle();
    expect(h.transport.payloads[1]!.conversation_id).toBe(dataOf(f)[0]!.metadata.conversation_id);
  });

  it("a turn's final: its items take history's ids quietly (edit, regenerate, picker without a reload)", async () => {
    const f = await fixture("happy");
    const fin = dataOf(f).at(-1)!.metadata;
    const cid = String(fin.conversation_id);
    const stored = (id: string, role: "user" | "assistant", content: string): HistoryMessage => ({
      id, role, content, conversation_id: cid, turn_id: "t", partial: false, created_at: "",
      tool_calls: [], confirmations: [], siblings: role === "user" ? { index: 0, count: 1, ids: [id] } : null,
    });
    h.rest.historyPage = { items: [stored("m-1", "user", "привет"), stored(String(fin.message_id), "assistant", "…")], next_cursor: null };
    const second = structuredClone(msgs(f));
    const final = second.filter((m) => m.type === "data").at(-1) as { data: { metadata: Record<string, unknown> }[] };
    final.data[0]!.metadata.message_id = "m-4";
    h.transport.queue({ messages: msgs(f) }, { messages: second });
    await h.started();
    h.model.send("привет");
    const shown = h.model.items.slice();
    await settle();
    expect(h.rest.calls).toContain(`history ${cid}`);
    expect(h.model.state).toBe("idle");
    expect(h.model.items.map((i) => [i.id, i.stored])).toEqual([["m-1", true], [fin.message_id, true]]);
    expect(h.model.items[0]).toMatchObject({ siblings: { count: 1 } });
    h.model.items.forEach((it, i) => expect(it).toBe(shown[i])); // the same items, adopted in place
    // A page that does not end with this turn's answer (older than it) lends nothing.
    h.model.send("ещё раз");
    await settle();
    expect(h.model.items.map((i) => i.stored)).toEqual([true, true, undefined, undefined]);
  });

  it("streaming ──[submission.cancel()]──→ idle (partial): Stop keeps the text", async () => {
    const f = await fixture("cancel");
    h.transport.queue({ messages: msgs(f), hang: true });
    await h.started();
    h.model.send("привет and echo 60 words");
    await settle();
    expect(h.model.state).toBe("streaming");
    h.model.stop();
    expect(h.model.state).toBe("idle");
    expect(h.transport.cancelled).toBe(1);
    const item = lastAssistant(h.model);
    expect(item.partial).toBe(true);
    expect(text(item)).toBe(dataOf(f).at(-1)!.content);
    // Recovery: streaming (cancelled) ── type new msg ──→ idle→streaming
    h.transport.queue({ messages: msgs(await fixture("happy")) });
    h.model.send("привет");
    expect(h.model.state).toBe("streaming");
    await settle();
    expect(h.model.state).toBe("idle");
  });
});

describe("tool cards", () => {
  it("tool_retry then tool_error (exhausted): «Повторная попытка... (1/2)», then ✗ with detail", async () => {
    const f = await fixture("retry_exhausted");
    const upTo = (type: string) => {
      const i = msgs(f).findIndex((m) => m.type === "data" && (m as { data: { metadata: { type?: string } }[] }).data[0]!.metadata.type === type);
      return msgs(f).slice(0, i + 1);
    };
    h.transport.queue({ messages: upTo("tool_retry"), hang: true });
    await h.started();
    h.model.send("Какие окружения есть?");
    await settle();
    const t = tools(lastAssistant(h.model))[0]!;
    expect(t).toMatchObject({ status: "retrying", attempt: 1, maxAttempts: 2 });
    expect(h.model.words.toolRetrying(t.attempt, t.maxAttempts)).toBe("Повторная попытка... (1/2)");
    h.model.stop();

    h.transport.queue({ messages: msgs(f) });
    h.model.send("Какие окружения есть?");
    await settle();
    const done = tools(lastAssistant(h.model))[0]!;
    expect(done.status).toBe("error");
    expect(done.error).toContain("502");
    expect(done.retryable).toBe(true);
    expect(h.model.state).toBe("idle"); // the turn goes on after a tool error
  });

  it("a non-transient failure is ✗ and not retryable", async () => {
    const f = await fixture("tool_failure");
    h.transport.queue({ messages: msgs(f) });
    await h.started();
    h.model.send("найди дашборды про продажи в ss-dev");
    await settle();
    expect(tools(lastAssistant(h.model))[0]).toMatchObject({ status: "error", retryable: false });
  });

  it("tool_timeout: ⏱ (30с-style text), then 🔄 sends action retry, never the message", async () => {
    const f = await fixture("tool_timeout");
    h.transport.queue({ messages: msgs(f, 0) }, { messages: msgs(f, 1) });
    await h.started();
    h.model.send("исследуй базу 2 в ss-dev");
    await settle();
    const t = tools(lastAssistant(h.model))[0]!;
    const timeout = dataOf(f).find((e) => e.metadata.type === "tool_timeout")!;
    expect(t).toMatchObject({ status: "timeout", timeoutSeconds: timeout.metadata.timeout_seconds, retryable: true });
    expect(h.model.words.toolTimeout(30)).toBe("Превышено время ожидания (30с)");
    expect(h.model.canRetry).toBe(true);
    h.model.retry();
    expect(h.model.state).toBe("streaming");
    await settle();
    const p = h.transport.payloads[1]!;
    expect(p.action).toBe("retry");
    expect(p.message.text).not.toBe("исследуй базу 2 в ss-dev");
    expect(p.conversation_id).toBe(dataOf(f)[0]!.metadata.conversation_id);
    expect(h.model.items.filter((i) => i.kind === "user")).toHaveLength(1);
    expect(h.model.state).toBe("idle");
  });
});

describe("awaiting_confirmation", () => {
  it("streaming ──[confirm_required]──→ awaiting; confirm ──→ streaming (confirmed) ──→ idle", async () => {
    const f = await fixture("confirm");
    vi.setSystemTime(cardTime(f));
    h.transport.queue({ messages: msgs(f, 0) }, { messages: msgs(f, 1) });
    await h.started();
    h.model.send("задеплой дашборд 42 в прод");
    await settle();
    expect(h.model.state).toBe("awaiting_confirmation");
    expect(h.model.inputLocked).toBe(true);
    const card = h.model.card!;
    const ev = dataOf(f).find((e) => e.metadata.type === "confirm_required")!.metadata;
    expect(card).toMatchObject({ confirmId: ev.confirm_id, risk: "write", riskLevel: "guarded", env: "prod",
                                 dangerous: false, permissionGranted: true, status: "pending" });
    expect(card.prompt).toBe(ev.prompt);
    expect(h.model.secondsLeft(card)).toBe(300);
    expect(h.model.canConfirm(card)).toBe(true); // not dangerous: armed at once
    await settle(3000);
    expect(h.model.secondsLeft(card)).toBe(297); // the timer runs 5:00 → 0:00
    h.model.confirm();
    h.model.confirm(); // a double click answers once
    expect(h.model.state).toBe("streaming");
    await settle();
    expect(h.transport.payloads).toHaveLength(2);
    expect(h.transport.payloads[1]).toMatchObject({ action: "confirm", conversation_id: ev.conversation_id,
                                                   message: { confirm_id: ev.confirm_id, tab_id: "tab-1" } });
    expect(card.status).toBe("confirmed");
    expect(h.model.card).toBeNull();
    expect(h.model.state).toBe("idle");
    const item = lastAssistant(h.model);
    expect(tools(item).map((t) => t.tool)).toEqual(["get_dashboard", "deploy_dashboard"]);
    expect(text(item)).toContain(dataOf(f, 1).at(-1)!.content);
  });

  it("awaiting ──[deny]──→ idle (confirm_resolved: denied)", async () => {
    const f = await fixture("deny");
    vi.setSystemTime(cardTime(f));
    h.transport.queue({ messages: msgs(f, 0) }, { messages: msgs(f, 1) });
    await h.started();
    h.model.send("задеплой дашборд 42 в ss-stage");
    await settle();
    const card = h.model.card!;
    h.model.deny();
    await settle();
    expect(h.transport.payloads[1]!.action).toBe("deny");
    expect(card.status).toBe("denied");
    expect(h.model.state).toBe("idle");
  });

  it("dangerous: Confirm is armed only after 10 s", async () => {
    const f = await fixture("dangerous");
    vi.setSystemTime(cardTime(f));
    h.transport.queue({ messages: msgs(f, 0) });
    await h.started();
    h.model.send("удали дашборд 9 в ss-dev");
    await settle();
    const card = h.model.card!;
    expect(card.dangerous).toBe(true);
    expect(h.model.canConfirm(card)).toBe(false);
    expect(h.model.canAnswer(card)).toBe(true); // Deny works at once
    h.model.confirm();
    expect(h.transport.payloads).toHaveLength(1); // refused while disarmed
    await settle(5000);
    expect(h.model.secondsToArm(card)).toBe(5);
    expect(h.model.canConfirm(card)).toBe(false);
    await settle(5000);
    expect(h.model.canConfirm(card)).toBe(true);
  });

  it("permission denied: Close only (deny), then the alternatives, each sent as a new message", async () => {
    const f = await fixture("permission_denied");
    vi.setSystemTime(cardTime(f));
    h.transport.queue({ messages: msgs(f, 0) }, { messages: msgs(f, 1) });
    await h.started();
    h.model.send("задеплой дашборд 42 в прод");
    await settle();
    const card = h.model.card!;
    expect(card.permissionGranted).toBe(false);
    expect(card.requiredRole).toBe("editor");
    expect(h.model.canConfirm(card)).toBe(false);
    h.model.deny();
    await settle();
    expect(h.model.state).toBe("idle");
    const item = lastAssistant(h.model);
    const alts = item.parts.find((p) => p.kind === "alternatives");
    expect(alts && alts.kind === "alternatives" && alts.alternatives.map((a) => a.prompt))
      .toEqual(["Запросить отчёт о состоянии дашборда", "Экспортировать конфигурацию дашборда"]);
    expect(item.parts.at(-1)!.kind).toBe("alternatives"); // after the agent's message
    h.transport.queue({ messages: msgs(await fixture("happy")) });
    h.model.send("Запросить отчёт о состоянии дашборда");
    expect(h.transport.payloads[2]).toMatchObject({ action: null, message: { text: "Запросить отчёт о состоянии дашборда" } });
  });

  it("awaiting ──[timeout 5min]──→ idle (expired): buttons off, «Повторить запрос?» sends retry", async () => {
    const f = await fixture("confirm");
    vi.setSystemTime(cardTime(f));
    h.transport.queue({ messages: msgs(f, 0) });
    await h.started();
    h.model.send("задеплой дашборд 42 в прод");
    await settle();
    const card = h.model.card!;
    await settle(300_000);
    expect(card.status).toBe("expired");
    expect(h.model.state).toBe("idle");
    expect(h.model.card).toBe(card); // the card stays
    expect(h.model.secondsLeft(card)).toBe(0);
    expect(h.model.canAnswer(card)).toBe(false);
    h.model.confirm();
    expect(h.transport.payloads).toHaveLength(1);
    // Recovery: awaiting_confirmation (expired) ── «Повторить запрос» ──→ streaming
    const again = await fixture("confirm");
    h.transport.queue({ messages: msgs(again, 0) });
    h.model.retry();
    expect(h.model.state).toBe("streaming");
    expect(h.transport.payloads[1]).toMatchObject({ action: "retry", conversation_id: h.model.conversationId });
  });

  it("the server says expired (a late answer): confirm_resolved expired, then retry gives a new card", async () => {
    const f = await fixture("expired");
    vi.setSystemTime(cardTime(f));
    h.transport.queue({ messages: msgs(f, 0) }, { messages: msgs(f, 1) }, { messages: msgs(f, 2) });
    await h.started();
    h.model.send("задеплой дашборд 42 в прод");
    await settle();
    const card = h.model.card!;
    h.model.confirm();
    await settle();
    expect(card.status).toBe("expired");
    expect(h.model.state).toBe("idle");
    h.model.retry();
    await settle();
    expect(h.transport.payloads[2]!.action).toBe("retry");
    expect(h.model.state).toBe("awaiting_confirmation");
    expect(h.model.card!.confirmId).not.toBe(card.confirmId);
  });
});

describe("error", () => {
  it("streaming ──[error]──→ error; Retry (action retry) ──→ streaming ──→ idle; partial text kept", async () => {
    const f = await fixture("llm_error");
    h.transport.queue({ messages: msgs(f, 0) }, { messages: msgs(f, 1) });
    await h.started();
    h.model.send("привет");
    await settle();
    expect(h.model.state).toBe("error");
    expect(h.model.error).toMatchObject({ kind: "stream", code: "LLM_UNAVAILABLE", retryable: true });
    expect(h.model.error!.text).toBe("Ошибка: модель сейчас недоступна; попробуйте ещё раз");
    expect(h.model.inputLocked).toBe(false); // "Retry, new message"
    h.model.retry();
    expect(h.model.state).toBe("streaming");
    await settle();
    expect(h.transport.payloads[1]).toMatchObject({ action: "retry", message: { text: "__retry__" } });
    expect(h.model.items.filter((i) => i.kind === "user")).toHaveLength(1);
    expect(h.model.state).toBe("idle");
    expect(text(lastAssistant(h.model))).toBe(dataOf(f, 1).at(-1)!.content);
  });

  it("an error mid-answer keeps the partial text", async () => {
    const f = await fixture("cancel");
    const lost = { type: "data", data: [{ role: "assistant", content: "Ошибка: ответ прерван: агент, который вёл его, перестал отвечать",
      metadata: { type: "error", code: "RUN_LOST", detail: "x", retryable: true, seq: 5,
                  run_id: dataOf(f)[0]!.metadata.run_id, conversation_id: dataOf(f)[0]!.metadata.conversation_id } }] };
    h.transport.queue({ messages: [...msgs(f), lost] });
    await h.started();
    h.model.send("привет and echo 60 words");
    await settle();
    expect(h.model.state).toBe("error");
    expect(h.model.error).toMatchObject({ code: "RUN_LOST", retryable: true });
    expect(text(lastAssistant(h.model))).toBe(dataOf(f).at(-1)!.content);
    expect(lastAssistant(h.model).partial).toBe(true);
  });

  it("refused before a run (CONVERSATION_BUSY): nothing stored, the text goes back, no retry of the old turn", async () => {
    const f = await fixture("busy");
    h.transport.queue({ messages: msgs(f) });
    await h.started();
    h.model.send("ещё");
    await settle();
    expect(h.model.state).toBe("error");
    expect(h.model.error).toMatchObject({ kind: "not_sent", code: "CONVERSATION_BUSY", retryable: false });
    expect(h.model.draft).toBe("ещё");
    expect(h.model.items).toHaveLength(0);
    expect(h.model.gated).toBe(true);
  });
});

describe("loading_history", () => {
  it("idle ──[load history]──→ loading_history ──[success]──→ idle", async () => {
    const r = (await fixture("rest")) as unknown as { history: { body: never } };
    let release!: () => void;
    h.rest.historyPage = () => new Promise((ok) => { release = () => ok(r.history.body); });
    await h.started();
    const done = h.model.openConversation("3b3e");
    expect(h.model.state).toBe("loading_history");
    expect(h.model.busy).toBe(true);
    expect(h.model.inputLocked).toBe(true);
    release();
    await done;
    expect(h.model.state).toBe("idle");
    expect(h.model.items.map((i) => i.kind)).toEqual(["user", "assistant"]);
    const item = lastAssistant(h.model);
    expect(tools(item)[0]).toMatchObject({ tool: "search_dashboards", status: "done" });
  });

  it("loading_history ──[failure]──→ error; Retry reloads", async () => {
    h.rest.historyPage = () => { throw new (class extends Error {})("boom"); };
    await h.started();
    await h.model.openConversation("c1");
    expect(h.model.state).toBe("error");
    expect(h.model.error?.kind).toBe("history");
    const r = (await fixture("rest")) as unknown as { history: { body: never } };
    h.rest.historyPage = r.history.body;
    h.model.retry();
    await settle();
    expect(h.model.state).toBe("idle");
    expect(h.rest.calls.filter((c) => c.startsWith("history"))).toHaveLength(2);
    expect(h.transport.payloads).toHaveLength(0); // a history retry is not a chat retry
  });

  it("a history that never answers ends in the error card after 30 s, not in skeletons forever", async () => {
    h.rest.historyPage = () => new Promise(() => undefined);
    await h.started();
    void h.model.openConversation("c1");
    await settle(29_000);
    expect(h.model.state).toBe("loading_history");
    await settle(1_500);
    expect(h.model.state).toBe("error");
    expect(h.model.error).toMatchObject({ kind: "history", retryable: true });
  });

  it("a card still pending in history reopens awaiting_confirmation", async () => {
    const r = (await fixture("rest")) as unknown as { pendingHistory: { body: { items: { confirmations: { status: string; card: { expires_at: string } }[] }[] } } };
    const pending = r.pendingHistory.body.items.flatMap((m) => m.confirmations).find((c) => c.status === "pending")!;
    vi.setSystemTime(Date.parse(pending.card.expires_at) - 60_000);
    h.rest.historyPage = r.pendingHistory.body as never;
    await h.started();
    await h.model.openConversation("c1");
    expect(h.model.state).toBe("awaiting_confirmation");
    expect(h.model.card?.status).toBe("pending");
  });
});

describe("disconnected", () => {
  it("idle ──[connect fail]──→ disconnected ──[retry 5×5s]──→ idle", async () => {
    h.transport.failConnects = 2;
    await h.started();
    expect(h.model.state).toBe("disconnected");
    expect(h.model.connection).toBe("disconnected");
    expect(h.model.reconnect).toEqual({ attempt: 1, secondsLeft: 5 });
    await settle(1000);
    expect(h.model.reconnect.secondsLeft).toBe(4); // «Переподключение через 4с...»
    await settle(4000);
    expect(h.model.reconnect.attempt).toBe(2);
    await settle(5000);
    expect(h.model.state).toBe("idle");
    expect(h.model.connection).toBe("connected");
    expect(h.transport.connects).toBe(3);
  });

  it("disconnected ──[retry exhausted]──→ disconnected_permanent; manual reconnect ──→ idle", async () => {
    h.transport.failConnects = 6;
    await h.started();
    await settle(5000 * 5 + 500);
    expect(h.model.state).toBe("disconnected_permanent");
    expect(h.transport.connects).toBe(6); // the first connect and 5 retries
    await settle(20_000);
    expect(h.transport.connects).toBe(6); // no more automatic tries
    h.transport.failConnects = 0;
    h.model.reconnectNow();
    await settle();
    expect(h.model.state).toBe("idle");
  });

  it("disconnected ──[manual reconnect, during the countdown]──→ idle", async () => {
    h.transport.failConnects = 1;
    await h.started();
    expect(h.model.state).toBe("disconnected");
    h.model.reconnectNow();
    await settle();
    expect(h.model.state).toBe("idle");
    expect(h.transport.connects).toBe(2);
  });

  it("a reconnect that never answers counts as failed after 10 s (the countdown goes on)", async () => {
    h.transport.failConnects = 1;
    await h.started();
    h.transport.hangConnects = 1;
    await settle(5000);
    expect(h.model.connection).toBe("connecting");
    await settle(10_000);
    expect(h.model.state).toBe("disconnected");
    expect(h.model.reconnect.attempt).toBe(2);
    await settle(5000);
    expect(h.model.state).toBe("idle");
  });

  it("idle, the agent dies: the poll notices (dot red, countdown)", async () => {
    await h.started();
    h.transport.probeOk = false;
    h.transport.failConnects = 100;
    await settle(5000);
    expect(h.model.state).toBe("disconnected");
    expect(h.model.connection).toBe("disconnected");
  });

  it("cut mid-run: disconnected; after reconnect the run is joined (same run_id, last seq, tab_id): no text lost", async () => {
    const f = await fixture("join");
    h.transport.queue({ messages: msgs(f, 0), cutAfter: 3 }, { messages: msgs(f, 1) });
    h.transport.failConnects = 0;
    await h.started();
    h.model.send("привет and echo 80 words");
    await settle();
    expect(h.model.state).toBe("disconnected");
    h.transport.failConnects = 1;
    await settle(5000);
    expect(h.model.state).toBe("disconnected"); // attempt 1 failed
    await settle(5000);
    await settle();
    const first = dataOf(f, 0);
    const join = h.transport.payloads[1]!;
    expect(join).toMatchObject({ action: "join", conversation_id: first[0]!.metadata.conversation_id,
      message: { run_id: first[0]!.metadata.run_id, last_seq: 3, tab_id: "tab-1" } });
    expect(h.model.state).toBe("idle");
    // The join replays from seq 5 (recorded after 4): the final content makes the text whole.
    expect(text(lastAssistant(h.model))).toBe(dataOf(f, 1).at(-1)!.content);
  });

  it("a card raised while disconnected appears after the join", async () => {
    const f = await fixture("confirm");
    vi.setSystemTime(cardTime(f));
    h.transport.queue({ messages: msgs(f, 0), cutAfter: 2 });
    await h.started();
    h.model.send("задеплой дашборд 42 в прод");
    await settle();
    expect(h.model.state).toBe("disconnected");
    const tail = msgs(f, 0).filter((m) => m.type === "data").slice(2);
    h.transport.queue({ messages: tail });
    await settle(5000);
    await settle();
    expect(h.transport.payloads[1]).toMatchObject({ action: "join", message: { last_seq: 2 } });
    expect(h.model.state).toBe("awaiting_confirmation");
    expect(h.model.card?.status).toBe("pending");
  });

  it("a join that finds the run gone (NO_RUN, JOIN_EXPIRED) reloads history", async () => {
    const f = await fixture("join");
    const nf = await fixture("join_not_found");
    const expiredJoin = structuredClone(msgs(nf));
    for (const m of expiredJoin) if (m.type === "data") {
      const ev = (m as { data: { metadata: Record<string, unknown> }[] }).data[0]!;
      ev.metadata.code = "JOIN_EXPIRED";
    }
    h.transport.queue({ messages: msgs(f, 0), cutAfter: 2 }, { messages: expiredJoin });
    await h.started();
    h.model.send("привет and echo 80 words");
    await settle();
    await settle(5000);
    await settle();
    expect(h.rest.calls.some((c) => c.startsWith("history"))).toBe(true);
    expect(h.model.state).toBe("idle");
  });
});

describe("multi-tab gate", () => {
  it("another tab's live run (/active) disables Send; our own lease does not", async () => {
    const f = await fixture("happy");
    h.transport.queue({ messages: msgs(f) });
    await h.started();
    h.model.send("привет");
    await settle();
    const own = dataOf(f)[0]!.metadata.run_id as string;
    h.rest.activeAnswer = { active: true, until: "x", run: { run_id: own, status: "completed", last_seq: 2 } };
    await settle(5000);
    expect(h.rest.calls.some((c) => c.startsWith("active"))).toBe(true);
    expect(h.model.gated).toBe(false);
    h.rest.activeAnswer = { active: true, until: "x", run: { run_id: "other-run", status: "running", last_seq: 4 } };
    await settle(5000);
    expect(h.model.gated).toBe(true);
    expect(h.model.canSend).toBe(false);
    h.model.send("ещё");
    expect(h.transport.payloads).toHaveLength(1);
    h.rest.activeAnswer = { active: false, until: null, run: null };
    await settle(5000);
    expect(h.model.canSend).toBe(true);
  });

  it("a reloaded tab (same tab_id) knows its own runs: no gate for its own lease", async () => {
    const f = await fixture("happy");
    const kept: string[][] = [];
    const ownRuns = { load: () => kept.at(-1) ?? [], save: (ids: string[]) => void kept.push(ids) };
    h.transport.queue({ messages: msgs(f) });
    await h.started({ ownRuns });
    h.model.send("привет");
    await settle();
    h.model.dispose();
    const own = dataOf(f)[0]!.metadata.run_id as string;
    expect(kept.at(-1)).toEqual([own]);
    h.rest.activeAnswer = { active: true, until: "x", run: { run_id: own, status: "completed", last_seq: 2 } };
    await h.started({ ownRuns }); // the reload
    await h.model.openConversation(String(dataOf(f)[0]!.metadata.conversation_id));
    expect(h.model.gated).toBe(false);
  });

  it("opening a conversation another tab is streaming in: gated from the start", async () => {
    h.rest.activeAnswer = { active: true, until: "x", run: { run_id: "r", status: "running", last_seq: 1 } };
    await h.started();
    await h.model.openConversation("c1");
    expect(h.model.gated).toBe(true);
    expect(h.transport.payloads).toHaveLength(0); // gated: watching is not forced on it
  });

  it("REST unreachable during the poll counts as a lost connection", async () => {
    const f = await fixture("happy");
    h.transport.queue({ messages: msgs(f) });
    await h.started();
    h.model.send("привет");
    await settle();
    h.rest.activeAnswer = unreachable;
    h.transport.failConnects = 100;
    await settle(5000);
    expect(h.model.state).toBe("disconnected");
  });
});

describe("new conversation", () => {
  it("empty: the welcome card's chips; newConversation clears", async () => {
    const f = await fixture("happy");
    h.transport.queue({ messages: msgs(f) });
    await h.started();
    expect(h.model.isNew).toBe(true);
    h.model.send(h.model.examples[0]!);
    await settle();
    expect(h.model.isNew).toBe(false);
    h.model.newConversation();
    expect(h.model.isNew).toBe(true);
    expect(h.model.conversationId).toBeNull();
  });
});
