// The panel page (/api/agent/ui/, web/) in headless Chromium against the real stack: every row of
// docs/ux.md's UX tests table, found by role, accessible name and ARIA attributes (web/README.md,
// "Selectors for the browser tests"), never by CSS class. Each state: a screenshot, axe-core
// (0 serious or critical), and no CSP violation.
//
// The page reaches agent A through a TCP proxy this file controls (the disconnect row cuts it);
// agent B's model is the OpenAI-compatible stub, so the LLM error row can make it refuse and
// then answer. Timers (the 10 s arming, the 5 s reconnect waits) are jumped with Playwright's
// clock; nothing in the product is patched or shortened. The last test stops agent A.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import {
  WAIT, assistant, checkState, dot, env, input, launch, log, openPage, rest, sandbox, sendBtn,
  sleep, stopBtn, tcpProxy, until, words, you,
} from "./lib.mjs";

const ALICE = env("TOKEN_ALICE");
const AGENT = env("AGENT_URL");
const LLM_AGENT = env("LLM_AGENT_URL");
const STUB = env("STUB_URL");

let browser;
let proxy;

before(async () => {
  browser = await launch("ru-RU");
  proxy = await tcpProxy(AGENT);
});

after(async () => {
  await browser?.close();
  await proxy?.close();
});

const card = (p, name = "⏸️ Требуется подтверждение") => p.getByRole("alertdialog", { name });
const tool = (p, title) => p.getByRole("group", { name: `Инструмент: ${title}` });
const busy = async (p) => (await log(p).getAttribute("aria-busy")) === "true";

// Records, on every DOM change, what a person would see of the stream: busy, Stop and Send,
// the input's lock and the last answer's length. A short stream can start and end between two
// polls of the test; this record cannot miss it.
async function traceStates(p) {
  await p.evaluate(() => {
    window.__trace = [];
    const snap = () => {
      const logEl = document.querySelector('[role="log"]');
      const buttons = [...document.querySelectorAll("button")].map((b) => b.textContent.trim());
      const box = document.querySelector("textarea, input[type=text]");
      const answers = [...document.querySelectorAll('[role="article"], article')]
        .filter((a) => (a.getAttribute("aria-label") ?? "") === "Ассистент");
      const s = { busy: logEl?.getAttribute("aria-busy") === "true",
                  stop: buttons.some((t) => t.includes("Остановить")),
                  send: buttons.some((t) => t.includes("Отправить")),
                  locked: !!box?.disabled,
                  text: answers.at(-1)?.textContent.length ?? 0 };
      const prev = window.__trace.at(-1);
      if (!prev || Object.keys(s).some((k) => s[k] !== prev[k])) window.__trace.push(s);
    };
    new MutationObserver(snap).observe(document.body, { subtree: true, childList: true,
                                                         attributes: true, characterData: true });
    snap();
  });
}
const trace = (p) => p.evaluate(() => window.__trace);

async function ready(p, user = "alice") {
  await p.getByRole("region", { name: "AgentChat" }).waitFor(WAIT);
  const picker = p.getByRole("combobox", { name: "Демо-пользователь" });
  if (await picker.count()) await picker.selectOption(user);
  await dot(p, "Подключено").waitFor(WAIT);
}

async function send(p, text) {
  await input(p).fill(text);
  await sendBtn(p).click();
  await you(p).filter({ hasText: text }).last().waitFor(WAIT);
}

async function idle(p) {
  await until("idle (Send back, log not busy)", async () =>
    !(await busy(p)) && (await sendBtn(p).count()) === 1 && (await stopBtn(p).count()) === 0);
}

async function newConversation(p) {
  await p.getByRole("button", { name: "Начать новый диалог" }).click();
  await p.getByRole("region", { name: "Новый диалог" }).waitFor(WAIT);
}

async function latestConversation(base = AGENT) {
  const { body } = await rest(base, "/api/assistant/conversations?limit=1", ALICE);
  return body.items[0];
}

async function history(id, base = AGENT) {
  const { status, body } = await rest(base, `/api/assistant/history?conversation_id=${id}`,
                                      ALICE);
  assert.equal(status, 200);
  return body.items;
}

const pageUrl = () => proxy.url + "/api/agent/ui/";

// --- the UX Tests table ---------------------------------------------------------------------------

// One tab for the rows that follow each other (idle → streaming → idle → …); a row run alone
// (--test-name-pattern) opens it.
let page;
async function mainTab() {
  if (!page) {
    page = await openPage(browser, pageUrl());
    await ready(page);
  }
  return page;
}

test("Empty convo: a new conversation shows the welcome card with the examples chips", async () => {
  await mainTab();
  const welcome = page.getByRole("region", { name: "Новый диалог" });
  await welcome.waitFor(WAIT);
  const chips = welcome.getByRole("button");
  assert.ok((await chips.count()) >= 3, "the Gradio examples as chips");
  assert.ok(await welcome.getByRole("button", { name: /Найди дашборды/i }).count(),
            "the chips are the /chat endpoint's examples");
  await checkState(page, "01-empty-conversation");
});

test("Happy path: «привет» streams (busy, Stop, input locked, text growing), then idle", async () => {
  await mainTab();
  await traceStates(page);
  await send(page, "привет");
  await idle(page);
  const seen = await trace(page);
  const streaming = seen.filter((s) => s.busy);
  assert.ok(streaming.length > 0, `a streaming state was shown: ${JSON.stringify(seen)}`);
  assert.ok(streaming.every((s) => s.stop && !s.send && s.locked),
            `while streaming: Stop instead of Send, input locked: ${JSON.stringify(streaming)}`);
  const lengths = streaming.map((s) => s.text).filter((n) => n > 0);
  assert.ok(new Set(lengths).size >= 2, `tokens appear as they stream: ${lengths}`);
  assert.ok((await assistant(page).last().innerText()).trim().length > 0);
  assert.equal(await input(page).isDisabled(), false);
  assert.equal(await dot(page, "Подключено").count(), 1, "connection dot green");
  await checkState(page, "02-idle-with-messages");
});

test("Tool call: a card with the tool's title, spinner then checkmark", async () => {
  await mainTab();
  await sandbox("/api/sandbox/faults", { operation: "search_dashboards", delay_s: 2 });
  await send(page, "найди дашборды про энергопотребление");
  const card_ = tool(page, "Поиск дашбордов").last();
  await card_.getByRole("img", { name: "Выполняется" }).waitFor(WAIT);
  assert.equal(await busy(page), true, "streaming while the tool runs");
  await checkState(page, "03-streaming-tool-running");
  await card_.getByRole("img", { name: "Готово" }).waitFor(WAIT);
  assert.equal(await card_.getByRole("img", { name: "Выполняется" }).count(), 0);
  await idle(page);
  assert.match(await assistant(page).last().innerText(), /энергопотреблени/i);
  await checkState(page, "04-tool-done");
});

test("Dangerous confirm: the ⏸️ card, its timer from 5:00, Confirm armed after 10 s", async () => {
  await mainTab();
  await newConversation(page);
  await send(page, "удали дашборд 7 в ss-dev");
  const dialog = card(page);
  await dialog.waitFor(WAIT);
  const timer = dialog.getByRole("timer", { name: "Осталось времени" });
  const left = (t) => { const [m, s] = t.trim().split(":").map(Number); return m * 60 + s; };
  const start = left(await timer.innerText());
  assert.ok(start > 270 && start <= 300, `the timer starts near 5:00: ${start}`);
  const confirm = dialog.getByRole("button", { name: "Подтвердить" });
  assert.equal(await confirm.isDisabled(), true, "dangerous: Confirm waits 10 s");
  assert.match(await dialog.innerText(), /Подтверждение станет доступно через \d+ с/);
  assert.match(await dialog.innerText(), /Окружение: ss-dev/);
  assert.equal(await busy(page), false, "streaming paused");
  await checkState(page, "05-awaiting-confirmation-dangerous");
  // The card is the server's: pending in the stored history, with its confirm_id.
  const conv = await latestConversation();
  const cards = (await history(conv.id)).flatMap((m) => m.confirmations);
  assert.equal(cards.length, 1);
  assert.equal(cards[0].status, "pending");
  assert.ok(cards[0].confirm_id && cards[0].card.dangerous === true);
  await page.clock.runFor(10_500);
  await until("Confirm armed", async () => !(await confirm.isDisabled()));
  assert.ok(left(await timer.innerText()) < start, "the timer runs down");
  await checkState(page, "06-awaiting-confirmation-armed");
});

test("Confirm accepted: ▶️, streaming resumes, the tool runs, idle", async () => {
  await mainTab();
  await traceStates(page);
  await card(page).getByRole("button", { name: "Подтвердить" }).click();
  await page.getByText("▶️ Подтверждено").waitFor(WAIT);
  await tool(page, "Удаление дашборда").last().getByRole("img", { name: "Готово" }).waitFor(WAIT);
  await idle(page);
  assert.ok((await trace(page)).some((s) => s.busy), "streaming resumed after the answer");
  assert.equal(await card(page).count(), 0, "the card collapsed");
  const conv = await latestConversation();
  const cards = (await history(conv.id)).flatMap((m) => m.confirmations);
  assert.equal(cards[0].status, "confirmed");
  await checkState(page, "07-confirm-accepted");
});

test("Confirm denied: ⏹️, nothing runs, idle", async () => {
  await mainTab();
  await newConversation(page);
  await send(page, "задеплой дашборд 42 в прод");
  await card(page).waitFor(WAIT);
  // Not dangerous (write, guarded): Confirm is available at once.
  assert.equal(await card(page).getByRole("button", { name: "Подтвердить" }).isDisabled(), false);
  await card(page).getByRole("button", { name: "Отклонить" }).click();
  await page.getByText("⏹️ Отклонено").waitFor(WAIT);
  await idle(page);
  assert.equal(await tool(page, "Деплой дашборда").count(), 0, "the deploy never ran");
  const conv = await latestConversation();
  const cards = (await history(conv.id)).flatMap((m) => m.confirmations);
  assert.equal(cards[0].status, "denied");
  await checkState(page, "08-confirm-denied");
});

test("Batched card: three deploys on one card, one unchecked, only two run", async () => {
  await mainTab();
  await newConversation(page);
  await send(page, "задеплой дашборд 41 в прод; задеплой дашборд 42 в прод; задеплой дашборд 43 в прод");
  await card(page).waitFor(WAIT);
  const boxes = card(page).getByRole("checkbox");
  assert.equal(await boxes.count(), 3);
  for (let i = 0; i < 3; i++) assert.equal(await boxes.nth(i).isChecked(), true, "all checked");
  await boxes.nth(1).uncheck();
  await checkState(page, "08b-batched-card");
  await card(page).getByRole("button", { name: "Подтвердить" }).click();
  await page.getByText("▶️ Подтверждено").waitFor(WAIT);
  await idle(page);
  const done = tool(page, "Деплой дашборда").getByRole("img", { name: "Готово" });
  assert.equal(await done.count(), 2, "the two checked deploys ran");
  const conv = await latestConversation();
  const [shown] = (await history(conv.id)).flatMap((m) => m.confirmations);
  assert.deepEqual(shown.card.calls.map((c) => c.result), ["confirmed", "denied", "confirmed"]);
});

test("Stream cancel: Stop mid-stream, idle, the partial text kept (and stored partial)", async () => {
  await mainTab();
  await newConversation(page);
  await send(page, "echo 200 words");
  const answer = assistant(page).last();
  await until("some streamed words", async () => words(await answer.innerText()) >= 10);
  await stopBtn(page).click();
  await idle(page);
  const kept = (await answer.innerText()).trim();
  await sleep(800);
  assert.equal((await answer.innerText()).trim(), kept, "no more text after Stop");
  assert.ok(words(kept) >= 10 && words(kept) < 200, `a partial answer: ${words(kept)} words`);
  const conv = await latestConversation();
  const stored = (await history(conv.id)).filter((m) => m.role === "assistant").at(-1);
  assert.equal(stored.partial, true);
  await checkState(page, "09-stream-cancelled");
});

test("Multi-tab gate: a second tab on the same conversation cannot send", async () => {
  await mainTab();
  await newConversation(page);
  await send(page, "какие окружения есть");
  await idle(page);
  const conv = await latestConversation();
  const second = await openPage(browser, pageUrl());
  await ready(second);
  await second.getByRole("navigation", { name: "Диалоги" })
    .getByRole("button", { name: conv.title, exact: true }).first().click();
  await you(second).filter({ hasText: "какие окружения есть" }).waitFor(WAIT);
  await second.getByRole("status", { name: "Диалог открыт в другой вкладке" }).or(
    second.getByText("Диалог открыт в другой вкладке")).first().waitFor(WAIT);
  await input(second).fill("и ещё вопрос");
  assert.equal(await sendBtn(second).isDisabled(), true, "tab 2: Send disabled");
  await checkState(second, "10-second-tab-gated");
  await second.close();
});

test("History load error: the REST call fails → error + Retry; Retry loads it", async () => {
  const conv = await latestConversation();
  const p = await openPage(browser, pageUrl());
  await ready(p);
  // The browser's own network layer answers the history call (Playwright routing): the
  // REST API failing as the page sees it, with the agent's own error shape.
  let release;
  const held = new Promise((r) => { release = r; });
  await p.route("**/api/assistant/history**", async (route) => {
    await held;
    await route.fulfill({ status: 503, contentType: "application/json",
                          body: JSON.stringify({ code: "STORAGE_UNAVAILABLE",
                                                 detail: "the database is unreachable" }) });
  });
  await p.getByRole("navigation", { name: "Диалоги" })
    .getByRole("button", { name: conv.title, exact: true }).first().click();
  const loading = p.getByRole("status", { name: "Загрузка истории" });
  await loading.waitFor(WAIT);
  assert.equal(await loading.getAttribute("aria-busy"), "true");
  assert.equal(await busy(p), true);
  assert.equal(await input(p).isDisabled(), true, "input locked while loading");
  await checkState(p, "11-loading-history");
  release();
  const alert = p.getByRole("alert").filter({ hasText: "Не удалось загрузить историю" });
  await alert.waitFor(WAIT);
  await checkState(p, "12-history-load-error");
  await p.unroute("**/api/assistant/history**");
  await alert.getByRole("button", { name: "Повторить" }).click();
  await you(p).filter({ hasText: "какие окружения есть" }).waitFor(WAIT);
  assert.equal(await alert.count(), 0);
  await p.close();
});

test("LLM error: «Ошибка: …» with Retry; Retry answers without repeating the message", async () => {
  const p = await openPage(browser, LLM_AGENT + "/api/agent/ui/");
  await ready(p);
  await fetch(STUB + "/mode", { method: "POST", body: JSON.stringify({ mode: "refuse" }) });
  try {
    await send(p, "привет");
    const alert = p.getByRole("alert").filter({ hasText: "Ошибка:" });
    await alert.waitFor(WAIT);
    await checkState(p, "13-llm-error");
    await fetch(STUB + "/mode", { method: "POST", body: JSON.stringify({ mode: "ok" }) });
    await alert.getByRole("button", { name: "Повторить" }).click();
    await until("an answer after Retry", async () =>
      (await alert.count()) === 0 && (await assistant(p).count()) > 0 &&
      (await assistant(p).last().innerText()).trim().length > 0 && !(await busy(p)));
    assert.equal(await you(p).filter({ hasText: "привет" }).count(), 1, "shown once");
    const conv = await latestConversation(LLM_AGENT);
    const users = (await history(conv.id, LLM_AGENT)).filter((m) => m.role === "user");
    assert.deepEqual(users.map((m) => m.content), ["привет"], "stored once: retry, not resend");
    await checkState(p, "14-llm-error-retried");
  } finally {
    await fetch(STUB + "/mode", { method: "POST", body: JSON.stringify({ mode: "ok" }) });
    await p.close();
  }
});

test("Gradio disconnect: cut mid-run → red, countdown, retries; restored → green, run rejoined " +
     "whole; agent stopped → five retries, then the manual reconnect", async () => {
  await mainTab();
  await newConversation(page);
  await send(page, "echo 200 words");
  const answer = assistant(page).last();
  await until("the stream under way", async () => words(await answer.innerText()) >= 5);
  await proxy.cut();
  await dot(page, "Нет соединения").waitFor(WAIT);
  const banner = page.getByRole("alert").filter({ hasText: "Агент недоступен" });
  await banner.waitFor(WAIT);
  assert.match(await banner.innerText(), /Переподключение через \d+с/);
  assert.match(await banner.innerText(), /Попытка 1 из 5/);
  assert.equal(await banner.getByRole("button", { name: "Переподключить" }).count(), 1);
  await checkState(page, "15-disconnected");
  // A retry while still cut fails and counts up.
  await page.clock.runFor(5_000);
  await until("the second attempt", async () => /Попытка 2 из 5/.test(await banner.innerText()));
  // The run goes on in the agent meanwhile (6 s of model time); let it finish there.
  const conv = await latestConversation();
  await until("the run finished in the agent", async () => {
    const msgs = await history(conv.id);
    return msgs.some((m) => m.role === "assistant" && !m.partial && words(m.content) >= 200);
  });
  await proxy.restore();
  await page.clock.runFor(5_000);
  await dot(page, "Подключено").waitFor(WAIT);
  await until("the banner gone", async () => (await banner.count()) === 0);
  const stored = (await history(conv.id)).filter((m) => m.role === "assistant").at(-1);
  await until("the rejoined run's full text", async () =>
    (await answer.innerText()).includes(stored.content.trim().split(/\s+/).at(-1)) &&
    words(await answer.innerText()) >= 200);
  await idle(page);
  await checkState(page, "16-reconnected-rejoined");

  // The agent process itself dies (SIGKILL: a graceful stop would wait for the page's open
  // connections); the proxy still listens and every connection it forwards is refused.
  process.kill(Number(env("AGENT_PID")), "SIGKILL");
  await until("the agent gone", async () => {
    try { await fetch(AGENT + "/livez"); return false; } catch { return true; }
  });
  // Every banner text from here on, so the count of attempts is what the page showed.
  await page.evaluate(() => {
    window.__banners = [];
    new MutationObserver(() => {
      for (const a of document.querySelectorAll('[role="alert"]')) {
        const t = a.textContent.replace(/\s+/g, " ").trim();
        if (t.startsWith("Агент недоступен") && window.__banners.at(-1) !== t) {
          window.__banners.push(t);
        }
      }
    }).observe(document.body, { subtree: true, childList: true, characterData: true });
  });
  await page.clock.runFor(5_000); // the idle liveness check finds the agent gone
  await dot(page, "Нет соединения").waitFor(WAIT);
  const alert = page.getByRole("alert").filter({ hasText: "Агент недоступен" }).first();
  await until("attempt 1", async () => /Попытка 1 из 5/.test(await alert.innerText()));
  for (let n = 2; n <= 5; n++) {
    await page.clock.runFor(5_000);
    await until(`attempt ${n}`, async () =>
      new RegExp(`Попытка ${n} из 5`).test(await alert.innerText()));
  }
  await page.clock.runFor(5_000); // the fifth retry fails too
  await until("disconnected_permanent", async () =>
    !/Переподключение через/.test(await alert.innerText()));
  assert.match(await alert.innerText(), /^\s*Агент недоступен\.\s*(Переподключить)?\s*$/);
  assert.equal(await alert.getByRole("button", { name: "Переподключить" }).count(), 1,
               "only the manual reconnect");
  await page.clock.runFor(30_000);
  assert.doesNotMatch(await alert.innerText(), /Переподключение через/,
                      "no more automatic retries");
  const attempts = (await page.evaluate(() => window.__banners))
    .map((t) => t.match(/Попытка (\d) из 5/)?.[1]).filter(Boolean);
  assert.deepEqual([...new Set(attempts)], ["1", "2", "3", "4", "5"], "five retries, in order");
  await checkState(page, "17-disconnected-permanent");
});
