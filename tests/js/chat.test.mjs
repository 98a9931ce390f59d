// The /chat contract (PROTOCOL §1, §2, §4, §5) through the real @gradio/client.
import { test } from "node:test";
import assert from "node:assert/strict";
import { chat, collect, connect, env, final, last, sandbox, sleep, tokens, types } from "./lib.mjs";

const alice = env("TOKEN_ALICE");

function assertSeq(events, conversationId) {
  events.forEach((e, i) => {
    assert.equal(e.metadata.seq, i + 1, "seq is 1, 2, 3… within one submit");
    assert.equal(e.role, "assistant");
    if (conversationId) assert.equal(e.metadata.conversation_id, conversationId);
  });
}

test("happy path: привет streams tokens and ends with the final message", async () => {
  const client = await connect(alice);
  const events = await chat(client, ["привет"]);
  assert.ok(events.length >= 2);
  const cid = events[0].metadata.conversation_id;
  assert.match(cid, /^[0-9a-f-]{36}$/);
  assertSeq(events, cid);
  assert.equal(events[0].metadata.type, "stream_token");
  const fin = last(events);
  assert.ok(fin.metadata.message_id, "the final plain message carries message_id");
  assert.equal(fin.metadata.type, undefined);
  assert.equal(fin.content, tokens(events), "the final text equals the joined tokens");
  assert.match(fin.content, /Привет/);
});

test("tool call: tool_start then tool_end for search_dashboards with one call_id", async () => {
  await sandbox("/api/sandbox/reset", {});
  const client = await connect(alice);
  const events = await chat(client, { message: "найди дашборды про энергопотребление" });
  const start = events.find((e) => e.metadata.type === "tool_start");
  const end = events.find((e) => e.metadata.type === "tool_end");
  assert.equal(start.metadata.tool, "search_dashboards");
  assert.equal(end.metadata.tool, "search_dashboards");
  assert.equal(start.metadata.call_id, end.metadata.call_id);
  assert.ok(events.indexOf(start) < events.indexOf(end));
  assert.ok(end.metadata.output.items.some((d) => d.id === 42));
  assert.ok(final(events));
  assertSeq(events);
});

test("retry: two 502s give tool_retry then tool_error with the retry exhausted", async () => {
  await sandbox("/api/sandbox/reset", {});
  await sandbox("/api/sandbox/faults", { operation: "search_dashboards", status: 502, times: 2 });
  const client = await connect(alice);
  const events = await chat(client, ["найди дашборды продажи"]);
  const kinds = types(events);
  const retry = events.find((e) => e.metadata.type === "tool_retry");
  const error = events.find((e) => e.metadata.type === "tool_error");
  assert.deepEqual({ attempt: retry.metadata.attempt, max: retry.metadata.max_attempts },
                   { attempt: 1, max: 2 });
  assert.equal(error.metadata.retry_count, 2);
  assert.equal(error.metadata.retry_exhausted, true);
  assert.equal(error.metadata.retryable, true);
  assert.equal(error.metadata.code, "TOOL_FAILURE");
  assert.equal(error.metadata.timeout, false);
  assert.equal(retry.metadata.call_id, error.metadata.call_id);
  assert.ok(kinds.indexOf("tool_start") < kinds.indexOf("tool_retry"));
  assert.ok(kinds.indexOf("tool_retry") < kinds.indexOf("tool_error"));
  // The turn goes on: the model gets the failure and answers.
  assert.ok(final(events), "the turn ends with an answer");
});

test("timeout: a slow tool ends with tool_timeout and the turn still answers", async () => {
  await sandbox("/api/sandbox/reset", {});
  await sandbox("/api/sandbox/faults", { operation: "superset_explore_database", delay_s: 6, times: 1 });
  const client = await connect(alice);
  const events = await chat(client, ["исследуй базу 1 в ss-dev"]);
  const t = events.find((e) => e.metadata.type === "tool_timeout");
  assert.ok(t, `expected tool_timeout in ${types(events)}`);
  assert.equal(t.metadata.tool, "superset_explore_database");
  assert.equal(t.metadata.timeout_seconds, 2);
  assert.equal(t.metadata.retryable, true);
  assert.ok(!types(events).includes("tool_retry"), "a timed-out attempt is not retried");
  assert.ok(final(events));
});

test("LLM down: the stream ends with a retryable LLM_UNAVAILABLE error", async () => {
  const client = await connect(alice, env("LLM_DOWN_GRADIO_URL"));
  const events = await chat(client, ["привет"]);
  const err = last(events);
  assert.equal(err.metadata.type, "error");
  assert.equal(err.metadata.code, "LLM_UNAVAILABLE");
  assert.equal(err.metadata.retryable, true);
});

test("cancel mid-stream keeps the partial answer; the next message works", async () => {
  const client = await connect(alice, env("SLOW_GRADIO_URL"));
  const sub = client.submit("/chat", ["привет"]);
  let cid;
  const events = await collect(sub, {
    onEvent: async (ev, all) => {
      cid = ev.metadata.conversation_id;
      if (all.length === 1) { await sub.cancel(); return "stop"; }
    },
  });
  assert.equal(events[0].metadata.type, "stream_token");
  await sleep(300);
  const next = await chat(client, ["привет ещё раз", null, cid]);
  assert.ok(final(next), `second turn completes: ${types(next)}`);
  assert.equal(final(next).metadata.conversation_id, cid);
});

test("the 7-input payload with a UIContext reaches the model for this turn", async () => {
  await sandbox("/api/sandbox/reset", {});
  const ui = JSON.stringify({ objectType: "dashboard", objectId: "42",
    objectName: "Отчёт по энергопотреблению", envId: "ss-dev", route: "/dashboards/42",
    contextVersion: 1 });
  // userJwt (slot 5) beside the header, which Gradio's queue routes need (agent/gradio/session_guard.py).
  const client = await connect(alice);
  const events = await chat(client, [{ text: "покажи здоровье этого дашборда", files: [] },
    null, null, ui, "alice", alice, "ss-stage"]);
  // The prefetch reads the dashboard across environments; the model's own call is scoped.
  const start = events.find((e) => e.metadata.type === "tool_start"
    && e.metadata.tool === "get_health_summary");
  assert.ok(start, `a tool ran: ${types(events)}`);
  assert.equal(start.metadata.input.dashboard_id, 42);
  assert.equal(start.metadata.input.env_id, "ss-dev", "the context's env for 'этот дашборд'");
  assert.ok(final(events));
});

test("named inputs: {message, action} with defaults for the rest", async () => {
  const client = await connect(alice);
  const events = await chat(client, { message: "hello", env_id: "ss-dev" });
  assert.ok(final(events));
  assert.match(final(events).content, /Hello/);
});

test("forged, expired and mismatched tokens give UNAUTHORIZED and run nothing", async () => {
  const forged = alice.slice(0, -6) + (alice.endsWith("AAAAAA") ? "BBBBBB" : "AAAAAA");
  const cases = [
    [connect(forged), ["привет"]],
    [connect(env("TOKEN_EXPIRED")), ["привет"]],
    [connect(alice), ["привет", null, null, null, "bob"]],
    [connect(alice), ["привет", null, null, null, null, env("TOKEN_BOB")]],
    [connect(null), ["привет"]],
  ];
  for (const [clientP, payload] of cases) {
    const events = await chat(await clientP, payload);
    assert.equal(events.length, 1, "the error is the only event");
    assert.equal(events[0].metadata.type, "error");
    assert.equal(events[0].metadata.code, "UNAUTHORIZED");
    assert.equal(events[0].metadata.retryable, false);
  }
});

test("oversized inputs give INVALID_REQUEST", async () => {
  const client = await connect(alice);
  const big = "я".repeat(9000); // 18 KB in UTF-8
  const ui = JSON.stringify({ objectType: "dashboard", objectId: "1", objectName: "x".repeat(5000),
    envId: "ss-dev", route: "/", contextVersion: 1 });
  const badVersion = JSON.stringify({ objectType: "dashboard", contextVersion: 2 });
  for (const payload of [[big], ["hi", null, null, ui], ["hi", null, null, badVersion],
                         ["hi", "explode"]]) {
    const events = await chat(client, payload);
    assert.equal(last(events).metadata.type, "error");
    assert.equal(last(events).metadata.code, "INVALID_REQUEST");
  }
});

test("UIContext reference: 'задеплой этот дашборд в прод' prefetches 42 and asks for a card", async () => {
  await sandbox("/api/sandbox/reset", {});
  const ui = JSON.stringify({ objectType: "dashboard", objectId: "42",
    objectName: "Отчёт по энергопотреблению", envId: "ss-dev", route: "/dashboards/42",
    contextVersion: 1 });
  const client = await connect(alice);
  const events = await chat(client, ["задеплой этот дашборд в прод", null, null, ui]);
  const pre = events.find((e) => e.metadata.type === "tool_end");
  assert.equal(pre.metadata.tool, "get_dashboard", "the prefetch is an ordinary tool call");
  assert.equal(pre.metadata.output.id, 42);
  const c = last(events);
  assert.equal(c.metadata.type, "confirm_required");
  assert.equal(c.metadata.tool_name, "deploy_dashboard");
  assert.deepEqual(c.metadata.tool_args, { dashboard_id: 42, env_id: "prod" });
});
