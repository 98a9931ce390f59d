// Words for people (issue 18) through @gradio/client: a table of Russian and English messages
// over every tool — success, empty result, failure, timeout, the user's denial, permission
// denied, expiry. Each case's events go to WORDS_OUT (JSON); tests/system/test_words.py
// judges the language of every answer, prompt and title with testkit/language.py (one
// helper for all the checks, not a hand-written expected string per case). Here: the
// structure every case must have, and the card prompt naming the dashboard's title.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { card, chat, cid, connect, env, final, sandbox, sleep, types } from "./lib.mjs";

const SHORT = env("SHORT_GRADIO_URL"); // confirmation TTL 3 s
const OUT = env("WORDS_OUT");
const TITLE = { ru: "Отчёт по энергопотреблению", en: "Energy consumption report" };
const fault = (operation, extra) => sandbox("/api/sandbox/faults", { operation, ...extra });

// [id, lang, user, text or (earlier outcomes) => text, options]
// options: then = confirm | deny | expire; before = () => setup; titled = the card names
// dashboard 42's title; url = another agent.
const CASES = [
  ["ru-capabilities", "ru", "alice", "Что ты умеешь?"],
  ["ru-environments", "ru", "alice", "Какие окружения есть?"],
  ["ru-search", "ru", "alice", "найди дашборды про энергопотребление"],
  ["ru-search-empty", "ru", "alice", "найди дашборды про зефир в ss-dev"],
  ["ru-dashboard-prefetch", "ru", "alice", "расскажи про дашборд 42"],
  ["ru-health-env", "ru", "alice", "какое состояние у prod?"],
  ["ru-health-dashboard", "ru", "alice", "здоровье дашборда 42 в prod"],
  ["ru-export", "ru", "alice", "экспортируй конфигурацию дашборда 42 из ss-dev"],
  ["ru-deploy-confirm", "ru", "alice", "задеплой дашборд 42 в прод", { then: "confirm", titled: true }],
  ["ru-deploy-deny", "ru", "alice", "задеплой дашборд 42 в ss-stage", { then: "deny", titled: true }],
  ["ru-deploy-no-permission", "ru", "carol", "задеплой дашборд 42 в прод", { then: "deny" }],
  ["ru-delete-confirm", "ru", "alice", "удали дашборд 9 в ss-dev", { then: "confirm" }],
  ["ru-maintenance-list", "ru", "alice", "покажи окна обслуживания в prod"],
  ["ru-maintenance-start", "ru", "alice", "начни обслуживание на ss-dev"],
  ["ru-maintenance-end", "ru", "alice",
   (done) => `заверши обслуживание ${started(done["ru-maintenance-start"])} в ss-dev`],
  ["ru-databases", "ru", "alice", "покажи базы данных в prod"],
  ["ru-explore", "ru", "alice", "исследуй базу 4 в ss-dev"],
  ["ru-explore-missing", "ru", "alice", "исследуй базу 99 в ss-dev"],
  ["ru-datasets", "ru", "alice", "найди датасет про платежи в ss-dev"],
  ["ru-dataset-refresh", "ru", "alice", "обнови датасет 6 в ss-dev"],
  ["ru-migrate-confirm", "ru", "alice", "перенеси дашборд 42 из ss-dev в ss-stage", { then: "confirm", titled: true }],
  ["ru-migrations", "ru", "alice", "покажи миграции в prod"],
  ["ru-task", "ru", "alice", "какой статус задачи task-seed-2"],
  ["ru-search-failure", "ru", "alice", "найди дашборды про продажи в ss-dev",
   { before: () => fault("search_dashboards", { status: 500 }) }],
  ["ru-retry-exhausted", "ru", "alice", "Какие окружения есть?",
   { before: () => fault("list_environments", { status: 502, times: 2 }) }],
  ["ru-timeout", "ru", "alice", "исследуй базу 2 в ss-dev",
   { before: () => fault("superset_explore_database", { delay_s: 3 }) }],
  ["ru-expired", "ru", "alice", "задеплой дашборд 42 в прод", { then: "expire", url: SHORT, titled: true }],
  ["ru-mixed", "ru", "alice", "Найди dashboards про энергопотребление"],
  ["en-capabilities", "en", "alice", "What can you do?"],
  ["en-environments", "en", "alice", "List the environments"],
  ["en-search", "en", "alice", "Find energy dashboards in prod"],
  ["en-search-empty", "en", "alice", "Find dashboards about marshmallow in ss-dev"],
  ["en-health", "en", "alice", "Health of prod"],
  ["en-export", "en", "alice", "Export the config of dashboard 42 from ss-dev"],
  ["en-deploy-confirm", "en", "alice", "Deploy dashboard 42 to prod", { then: "confirm", titled: true }],
  ["en-deploy-deny", "en", "alice", "Deploy dashboard 42 to ss-stage", { then: "deny", titled: true }],
  ["en-deploy-no-permission", "en", "carol", "Deploy dashboard 42 to prod", { then: "deny" }],
  ["en-delete-deny", "en", "alice", "Delete dashboard 10 in ss-dev", { then: "deny" }],
  ["en-maintenance-list", "en", "alice", "Show maintenance windows in prod"],
  ["en-databases", "en", "alice", "List databases in prod"],
  ["en-explore", "en", "alice", "Explore database 1 in ss-stage"],
  ["en-datasets", "en", "alice", "Find datasets about payments in ss-dev"],
  ["en-dataset-refresh", "en", "alice", "Refresh dataset 2 in ss-dev"],
  ["en-migrate-confirm", "en", "alice", "Migrate dashboard 42 from ss-dev to prod", { then: "confirm", titled: true }],
  ["en-task", "en", "alice", "What is the status of task task-seed-1?"],
  ["en-failure", "en", "alice", "List databases in ss-dev",
   { before: () => fault("list_databases", { status: 500 }) }],
  ["en-retry-exhausted", "en", "alice", "List the environments",
   { before: () => fault("list_environments", { status: 503, times: 2 }) }],
  ["en-expired", "en", "alice", "Deploy dashboard 42 to prod", { then: "expire", url: SHORT, titled: true }],
];

function started(outcome) {
  const end = outcome.submits[0].find((e) => e.metadata.type === "tool_end");
  assert.ok(end?.metadata.output?.id, "the maintenance window that started");
  return end.metadata.output.id;
}

const compact = (events) => events.map((e) => ({ content: e.content, metadata: e.metadata }));

test(`${CASES.length} messages: every case ends in an answer with titles on its tools`, async () => {
  assert.ok(CASES.length >= 30);
  await sandbox("/api/sandbox/reset", {});
  const clients = {};
  const done = {};
  for (const [id, lang, user, text, opts = {}] of CASES) {
    const key = `${user}|${opts.url ?? ""}`;
    clients[key] ??= await connect(env(`TOKEN_${user.toUpperCase()}`), opts.url);
    const client = clients[key];
    if (opts.before) await opts.before();
    const message = typeof text === "function" ? text(done) : text;
    const first = await chat(client, [message]);
    const submits = [first];
    const c = card(first);
    if (opts.then) {
      assert.ok(c, `${id}: a card (${types(first)})`);
      if (opts.then === "expire") await sleep(4000);
      const action = opts.then === "expire" ? "confirm" : opts.then;
      submits.push(await chat(client, [{ text: "__resume__", files: [] }, action, cid(first)]));
    } else {
      assert.ok(!c, `${id}: no card (${types(first)})`);
    }
    const answer = final(submits[submits.length - 1]);
    assert.ok(answer, `${id}: a final answer (${submits.map(types)})`);
    for (const ev of submits.flat()) {
      const m = ev.metadata;
      if (m.type?.startsWith("tool_")) {
        assert.ok(m.title && m.title !== m.tool, `${id}: ${m.type} has a title: ${m.title}`);
      }
    }
    if (opts.titled) {
      assert.ok(c.metadata.prompt.includes(TITLE[lang]),
                `${id}: the card names the dashboard: ${c.metadata.prompt}`);
    }
    done[id] = { id, lang, user, text: message, then: opts.then ?? null, titled: !!opts.titled,
                 submits: submits.map(compact) };
  }
  writeFileSync(OUT, JSON.stringify(Object.values(done), null, 1));
});
