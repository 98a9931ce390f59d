// Human in the loop (PROTOCOL §3, §4; 002's awaiting_confirmation rows) through @gradio/client.
import { test } from "node:test";
import assert from "node:assert/strict";
import { audit, card, chat, cid, collect, connect, env, final, last, resolved, rest, sandbox,
         sleep, types } from "./lib.mjs";

const alice = env("TOKEN_ALICE");
const bob = env("TOKEN_BOB");
const carol = env("TOKEN_CAROL");
const SHORT = env("SHORT_GRADIO_URL"); // confirmation TTL 3 s, lease 1 s

const deployed = async (key) =>
  (await audit({ operation: "deploy_dashboard", idempotency_key: key })).filter((a) => a.outcome === "ok");

test("dangerous confirm: every card field; the stream ends with the card", async () => {
  const client = await connect(alice);
  const events = await chat(client, ["задеплой дашборд 42 в прод"]);
  const c = card(events);
  assert.equal(last(events), c, "the stream ends after confirm_required");
  const m = c.metadata;
  assert.match(m.confirm_id, /^[0-9a-f-]{36}$/);
  assert.equal(m.thread_id, cid(events));
  assert.equal(m.tool_name, "deploy_dashboard");
  assert.deepEqual(m.tool_args, { dashboard_id: 42, env_id: "prod" });
  assert.deepEqual([m.risk, m.risk_level, m.dangerous], ["write", "guarded", false]);
  assert.equal(m.env_context, "prod");
  assert.equal(m.permission_granted, true);
  assert.equal(m.required_role, null);
  assert.equal(m.alternatives, null);
  assert.ok(m.prompt.length > 0);
  const left = Date.parse(m.expires_at) - Date.now();
  assert.ok(left > 240_000 && left <= 300_000, `expires in ~5 minutes (${left} ms)`);
  // a destructive tool is dangerous
  const del = card(await chat(client, ["удали дашборд 7 в ss-dev"]));
  assert.deepEqual([del.metadata.risk, del.metadata.risk_level, del.metadata.dangerous],
                   ["destructive", "dangerous", true]);
});

test("confirm accepted: confirm_resolved, the call runs exactly once, the turn answers", async () => {
  const client = await connect(alice);
  const first = await chat(client, ["задеплой дашборд 42 в ss-stage"]);
  const c = card(first).metadata;
  const second = await chat(client, [{ text: "__resume__", files: [] }, "confirm", cid(first)]);
  assert.deepEqual(resolved(second).metadata.result, "confirmed");
  assert.equal(resolved(second).metadata.confirm_id, c.confirm_id);
  assert.equal(second[0].metadata.type, "confirm_resolved");
  const end = second.find((e) => e.metadata.type === "tool_end");
  assert.equal(end.metadata.tool, "deploy_dashboard");
  assert.ok(end.metadata.output.task_id);
  assert.ok(final(second));
  assert.equal((await deployed(c.confirm_id)).length, 1, "one execution under the card's key");
  // a repeated confirm finds nothing pending and runs nothing
  const again = await chat(client, ["__resume__", "confirm", cid(first)]);
  assert.equal(last(again).metadata.code, "NO_PENDING_CONFIRMATION");
  assert.equal((await deployed(c.confirm_id)).length, 1);
});

test("confirm denied: confirm_resolved denied, the call never ran, the agent answers", async () => {
  const client = await connect(alice);
  const first = await chat(client, ["задеплой дашборд 43 в прод"]);
  const c = card(first).metadata;
  const second = await chat(client, ["__resume__", "deny", cid(first)]);
  assert.equal(resolved(second).metadata.result, "denied");
  assert.ok(!types(second).includes("tool_start"));
  assert.ok(final(second));
  assert.equal((await audit({ idempotency_key: c.confirm_id })).length, 0);
});

test("carol deploying to prod: permission denied, close offers alternatives, confirm is FORBIDDEN",
  async () => {
    const client = await connect(carol);
    const first = await chat(client, ["задеплой дашборд 42 в прод"]);
    const m = card(first).metadata;
    assert.equal(m.permission_granted, false);
    assert.ok(m.required_role, "the role that would allow it");
    assert.ok(m.alternatives.length >= 1);
    for (const alt of m.alternatives) {
      assert.ok(["get_health_summary", "export_config"].includes(alt.action));
      assert.ok(alt.prompt.length > 0);
    }
    const forbidden = await chat(client, ["__resume__", "confirm", cid(first)]);
    assert.equal(last(forbidden).metadata.code, "FORBIDDEN");
    const closed = await chat(client, ["__resume__", "deny", cid(first)]);
    assert.equal(resolved(closed).metadata.result, "denied");
    assert.ok(!types(closed).includes("tool_start"));
    assert.match(final(closed).content, /отчёт о состоянии|конфигурац/i);
    assert.equal((await audit({ operation: "deploy_dashboard", user_actor: "carol" })).length, 0);
  });

test("several calls in one message: one card lists them; the approved subset runs, the rest is denied",
  async () => {
    const client = await connect(alice);
    const first = await chat(client, ["задеплой дашборд 44 в прод и удали дашборд 8 в ss-dev"]);
    const c = card(first).metadata;
    assert.equal(c.tool_name, "deploy_dashboard"); // the first listed call's fields, as before
    assert.deepEqual(c.calls.map((x) => x.tool_name), ["deploy_dashboard", "delete_dashboard"]);
    // Reads may run first (the object's name for the card); no listed write before the answer.
    const before = first.filter((e) => e.metadata.type === "tool_start").map((e) => e.metadata.tool);
    assert.ok(!before.some((t) => t === "deploy_dashboard" || t === "delete_dashboard"), `${before}`);
    const deploy = c.calls[0].call_id;
    const answered = await chat(client, [{ text: "__resume__", approve: [deploy] }, "confirm", cid(first)]);
    assert.equal(resolved(answered).metadata.result, "confirmed");
    const starts = answered.filter((e) => e.metadata.type === "tool_start").map((e) => e.metadata.tool);
    assert.deepEqual(starts, ["deploy_dashboard"], "only the approved call runs");
    assert.ok(final(answered));
  });

test("stale and missing confirmations change nothing", async () => {
  const client = await connect(alice);
  const idle = await chat(client, ["привет"]);
  const none = await chat(client, ["__resume__", "confirm", cid(idle)]);
  assert.equal(last(none).metadata.code, "NO_PENDING_CONFIRMATION");
  const first = await chat(client, ["задеплой дашборд 45 в прод"]);
  const stale = await chat(client, [{ text: "__resume__", confirm_id: "00000000-0000-0000-0000-000000000000" },
                                    "confirm", cid(first)]);
  assert.equal(last(stale).metadata.code, "STALE_CONFIRMATION");
  const ok = await chat(client, [{ text: "__resume__", confirm_id: card(first).metadata.confirm_id },
                                 "deny", cid(first)]);
  assert.equal(resolved(ok).metadata.result, "denied");
});

test("a new message over a pending card resolves it as denied first", async () => {
  const client = await connect(alice);
  const first = await chat(client, ["задеплой дашборд 46 в прод"]);
  const c = card(first).metadata;
  const next = await chat(client, ["найди дашборды про продажи", null, cid(first)]);
  assert.equal(next[0].metadata.type, "confirm_resolved");
  assert.equal(next[0].metadata.result, "denied");
  assert.equal(next[0].metadata.confirm_id, c.confirm_id);
  assert.ok(types(next).includes("tool_start"));
  assert.ok(final(next));
  const late = await chat(client, ["__resume__", "confirm", cid(first)]);
  assert.equal(last(late).metadata.code, "NO_PENDING_CONFIRMATION");
  assert.equal((await audit({ idempotency_key: c.confirm_id })).length, 0);
});

test("bob answering alice's card gets NOT_FOUND and nothing runs", async () => {
  const first = await chat(await connect(alice), ["задеплой дашборд 47 в прод"]);
  const c = card(first).metadata;
  const theft = await chat(await connect(bob), ["__resume__", "confirm", cid(first)]);
  assert.equal(theft.length, 1);
  assert.equal(last(theft).metadata.code, "NOT_FOUND");
  assert.equal((await audit({ idempotency_key: c.confirm_id })).length, 0);
  const active = await rest(`/api/agent/conversations/${cid(first)}/active`, bob);
  assert.equal(active.status, 404);
});

test("expiry: a late answer gets expired and runs nothing; retry re-runs the request", async () => {
  const client = await connect(alice, SHORT);
  const first = await chat(client, ["задеплой дашборд 48 в прод"]);
  const c = card(first).metadata;
  await sleep(3500);
  const late = await chat(client, ["__resume__", "confirm", cid(first)]);
  assert.equal(resolved(late).metadata.result, "expired");
  assert.ok(!types(late).includes("tool_start"));
  assert.equal((await audit({ idempotency_key: c.confirm_id })).length, 0);
  const again = await chat(client, ["__resume__", "retry", cid(first)]);
  const c2 = card(again);
  assert.ok(c2, `retry asks again: ${types(again)}`);
  assert.equal(c2.metadata.tool_name, "deploy_dashboard");
  assert.deepEqual(c2.metadata.tool_args, c.tool_args);
});

test("multi-tab gate: a second tab is refused while the first streams; the card outlives the lease",
  async () => {
    const tab1 = await connect(alice, env("SLOW_GRADIO_URL"));
    const sub = tab1.submit("/chat", ["привет, расскажи о себе"]);
    let conv;
    let busy;
    await collect(sub, {
      onEvent: async (ev) => {
        if (conv) return;
        conv = ev.metadata.conversation_id;
        const tab2 = await connect(alice, env("SLOW_GRADIO_URL"));
        busy = await chat(tab2, ["тоже привет", null, conv]);
        const act = await rest(`/api/agent/conversations/${conv}/active`, alice,
                               { headers: {} });
        assert.equal(act.status, 200);
        assert.equal(act.body.active, true);
        assert.ok(Date.parse(act.body.until) > Date.now());
      },
    });
    assert.equal(last(busy).metadata.code, "CONVERSATION_BUSY");
    assert.equal(last(busy).metadata.retryable, true);

    // A card outlives the 1 s lease: after it, another tab answers it.
    const t1 = await connect(alice, SHORT);
    const first = await chat(t1, ["задеплой дашборд 37 в прод"]);
    const busyNow = await chat(await connect(alice, SHORT), ["__resume__", "confirm", cid(first)]);
    assert.equal(last(busyNow).metadata.code, "CONVERSATION_BUSY");
    await sleep(1300);
    const t2 = await connect(alice, SHORT);
    const answered = await chat(t2, ["__resume__", "confirm", cid(first)]);
    assert.equal(resolved(answered).metadata.result, "confirmed");
    assert.ok(types(answered).includes("tool_end"));
  });

test("two confirms racing from two clients: exactly one execution", async () => {
  const first = await chat(await connect(alice, SHORT), ["задеплой дашборд 36 в прод"]);
  const c = card(first).metadata;
  await sleep(1300); // past the 1 s lease
  const [a, b] = await Promise.all([connect(alice, SHORT), connect(alice, SHORT)]);
  const results = await Promise.all([a, b].map((cl) => chat(cl, ["__resume__", "confirm", cid(first)])));
  const winners = results.filter((r) => resolved(r)?.metadata.result === "confirmed");
  assert.equal(winners.length, 1, JSON.stringify(results.map(types)));
  const loser = results.find((r) => r !== winners[0]);
  assert.ok(["CONVERSATION_BUSY", "NO_PENDING_CONFIRMATION"].includes(last(loser).metadata.code));
  assert.equal((await deployed(c.confirm_id)).length, 1);
});
