// Issue 36, the panel for daily use, in headless Chromium against the real stack: Markdown (a
// streamed list, a stored answer's table and code; a script tag and an image from another
// origin neither run nor fetched), the reloaded history's tool titles, endless lists (the 120th
// conversation, search results, older messages), rename and a title for an untitled
// conversation, an upload reaching the model (button and drop; a refused file says why), a
// silent connection cut noticed by the missed heartbeats and rejoined, Stop on a rejoined run,
// and the card's words. Each new state: a screenshot, axe-core (0 serious or critical), no CSP
// violation. Found by role and accessible name, as panel.test.mjs does.
//
// Real time (no Playwright clock): the heartbeat is the agent's own (15 s by default; this
// file's agent beats every 5 s, test_panel.py), and a silent cut is noticed after two missed
// beats.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import {
  WAIT, assistant, checkState, dot, env, input, launch, log, openPage, rest, sandbox, sendBtn,
  sleep, stopBtn, tcpProxy, until, words, you,
} from "./lib.mjs";

const AGENT = env("AGENT_URL");
const TOKENS = { alice: env("TOKEN_ALICE"), carol: env("TOKEN_CAROL") };
const EVIL = "http://127.0.0.1:9"; // nothing listens: a request there is only seen, never served

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

const list = (p) => p.getByRole("list", { name: "Список диалогов" });
const convButton = (p, title) => list(p).getByRole("button", { name: title, exact: true });

async function open(user = "alice") {
  const p = await openPage(browser, proxy.url + "/api/agent/ui/", { clock: false });
  p.foreign = [];
  p.on("request", (r) => {
    const url = r.url();
    if (!url.startsWith("data:") && new URL(url).origin !== new URL(proxy.url).origin) p.foreign.push(url);
  });
  await p.getByRole("region", { name: "AgentChat" }).waitFor(WAIT);
  await p.getByRole("combobox", { name: "Демо-пользователь" }).selectOption(user);
  await dot(p, "Подключено").waitFor(WAIT);
  return p;
}

async function send(p, text) {
  await input(p).fill(text);
  await sendBtn(p).click();
  await you(p).filter({ hasText: text }).last().waitFor(WAIT);
}

async function idle(p) {
  await until("idle", async () => (await log(p).getAttribute("aria-busy")) !== "true" &&
    (await sendBtn(p).count()) === 1 && (await stopBtn(p).count()) === 0);
}

const api = (user, path, init) => rest(AGENT, path, TOKENS[user], init);
const post = (user, path, body, method = "POST") => api(user, path, { method, body: JSON.stringify(body) });

async function newest(user) {
  return (await api(user, "/api/assistant/conversations?limit=1")).body.items[0];
}

test("Markdown: a streamed answer's list as list items; a stored answer's table and code as " +
     "elements; a script tag and another origin's image neither run nor fetched", async () => {
  const p = await open();
  await send(p, "найди дашборды про энергопотребление");
  await idle(p);
  const answer = assistant(p).last();
  assert.ok(await answer.getByRole("list").count() >= 1 && await answer.getByRole("listitem").count() >= 1,
            await answer.innerText());
  assert.doesNotMatch(await answer.innerText(), /^- /m, "no list dash shown as text");

  // An answer as an ss-tools frontend stores it (REST append), with hostile parts.
  const conv = (await post("alice", "/api/assistant/conversations", { title: "Разметка" })).body;
  await post("alice", `/api/assistant/conversations/${conv.id}/messages`,
             { id: `u-${conv.id}`, role: "user", content: "покажи таблицу" });
  const md = ["| Дашборд | Владелец |", "|:--|--:|", "| «Отчёт по энергопотреблению» | carol |", "",
              "```sql", "select 1;", "```", "", "<script>window.__pwned = 1</script>", "",
              `![логотип](${EVIL}/l.png) <img src="${EVIL}/h.png"> [документация](https://example.org/docs)`,
              " [нажми](javascript:window.__pwned=2) `inline`"].join("\n");
  await post("alice", `/api/assistant/conversations/${conv.id}/messages`,
             { id: `a-${conv.id}`, role: "assistant", content: md });
  await p.reload();
  await p.getByRole("combobox", { name: "Демо-пользователь" }).selectOption("alice");
  await convButton(p, "Разметка").click();
  const shown = assistant(p).last();
  const table = shown.getByRole("table");
  await table.waitFor(WAIT);
  assert.equal(await table.getByRole("columnheader").count(), 2);
  assert.equal(await table.getByRole("cell", { name: "carol" }).count(), 1);
  assert.equal(await shown.locator("pre code").innerText(), "select 1;");
  assert.equal(await shown.getByRole("button", { name: "Копировать" }).count(), 1);
  const link = shown.getByRole("link", { name: "документация" });
  assert.equal(await link.getAttribute("target"), "_blank");
  assert.equal(await link.getAttribute("rel"), "noopener noreferrer");
  assert.match(await shown.innerText(), /документация \(example\.org\)/, "the link shows its host");
  assert.equal(await shown.locator("script, img").count(), 0, "no script or image element");
  assert.equal(await shown.locator('a[href^="javascript:"]').count(), 0);
  assert.match(await shown.innerText(), /<script>window.__pwned = 1<\/script>/, "raw HTML as text");
  assert.equal(await p.evaluate(() => window.__pwned), undefined, "nothing ran");
  await sleep(500);
  assert.deepEqual(p.foreign, [], "no request left the page's origin");
  await checkState(p, "d01-markdown");
  await p.close();
});

test("History as it streamed: the reloaded tool card shows its title, not the machine name", async () => {
  const p = await open();
  await sandbox("/api/sandbox/faults", { operation: "search_dashboards", delay_s: 1 });
  await send(p, "найди дашборды про энергопотребление");
  await p.getByRole("group", { name: "Инструмент: Поиск дашбордов" }).last().waitFor(WAIT);
  await idle(p);
  const conv = await newest("alice");
  await p.reload();
  await p.getByRole("combobox", { name: "Демо-пользователь" }).selectOption("alice");
  await convButton(p, conv.title).first().click();
  const card = p.getByRole("group", { name: "Инструмент: Поиск дашбордов" }).last();
  await card.waitFor(WAIT);
  await card.getByRole("img", { name: "Готово" }).waitFor(WAIT);
  assert.equal(await p.getByRole("group", { name: "Инструмент: search_dashboards" }).count(), 0);
  await checkState(p, "d02-history-titles");
  await p.close();
});

test("Endless lists: the 120th conversation by scrolling, search results paged, older messages; " +
     "rename; an untitled conversation named by its first message", async () => {
  for (let i = 1; i <= 125; i++) {
    const r = await post("carol", "/api/assistant/conversations", { title: `Архив ${String(i).padStart(3, "0")}` });
    assert.equal(r.status, 201);
  }
  const p = await open("carol");
  await convButton(p, "Архив 125").waitFor(WAIT);
  assert.equal(await list(p).getByRole("button", { name: /^Архив/ }).count(), 50, "one page first");
  const scrollTo = async (title) => until(`${title} by scrolling`, async () => {
    if (await convButton(p, title).count()) return true;
    await list(p).getByRole("listitem").last().scrollIntoViewIfNeeded();
    return false;
  });
  await scrollTo("Архив 006"); // the 120th, newest first
  assert.ok(await list(p).getByRole("button", { name: /^Архив/ }).count() >= 120);
  await checkState(p, "d03-list-scrolled");

  await p.getByRole("searchbox", { name: "Поиск диалогов" }).fill("Архив");
  await until("the search's first page", async () =>
    (await list(p).getByRole("button", { name: /^Архив/ }).count()) === 50);
  await scrollTo("Архив 001"); // the 125th result
  await p.getByRole("searchbox", { name: "Поиск диалогов" }).fill("");
  await convButton(p, "Архив 125").waitFor(WAIT);

  // Rename in the list (REST PATCH): the new title at once, and stored.
  await list(p).getByRole("button", { name: "Переименовать диалог «Архив 125»" }).click();
  const box = p.getByRole("textbox", { name: "Новое название" });
  await box.fill("Отчёт по энергопотреблению, итог");
  await checkState(p, "d04-renaming");
  await box.press("Enter");
  await convButton(p, "Отчёт по энергопотреблению, итог").waitFor(WAIT);
  assert.equal((await newest("carol")).title, "Отчёт по энергопотреблению, итог");

  // Created over REST without a title: its first message names it.
  const bare = (await post("carol", "/api/assistant/conversations", {})).body;
  assert.equal(bare.title, "");
  await post("carol", `/api/assistant/conversations/${bare.id}/messages`,
             { id: `u-${bare.id}`, role: "user", content: "Сколько дашбордов в prod?" });
  // 120 messages: the log pages back as it is scrolled to the top.
  for (let i = 1; i <= 120; i++) {
    await post("carol", `/api/assistant/conversations/${bare.id}/messages`,
               { id: `m-${bare.id}-${i}`, role: i % 2 ? "assistant" : "user",
                 content: `сообщение ${String(i).padStart(3, "0")}` });
  }
  await p.reload();
  await p.getByRole("combobox", { name: "Демо-пользователь" }).selectOption("carol");
  await convButton(p, "Сколько дашбордов в prod?").click();
  await log(p).getByText("сообщение 120").waitFor(WAIT);
  assert.equal(await log(p).getByText("сообщение 001").count(), 0, "one page first");
  await until("the first message by scrolling up", async () => {
    if (await you(p).filter({ hasText: "Сколько дашбордов в prod?" }).count()) return true;
    await log(p).evaluate((el) => { el.scrollTop = 0; });
    return false;
  });
  assert.equal(await log(p).getByText(/^сообщение \d+$/).count(), 120);
  await checkState(p, "d05-older-messages");
  await p.close();
});

test("Uploads: a file by the button and one dropped reach the model; a file over the limit " +
     "is refused with its reason before anything is sent", async () => {
  const p = await open();
  await p.getByRole("button", { name: "Начать новый диалог" }).click();
  assert.match(await p.getByText(/До 5 файлов, до 1 МБ каждый, 5 МБ вместе/).innerText(), /5 МБ/,
               "the limits are shown before a file is chosen");
  const marker = `маркер-${Date.now()}`;
  const chooser = p.waitForEvent("filechooser");
  await p.getByRole("button", { name: "Прикрепить файлы" }).click();
  await (await chooser).setFiles([
    { name: "note.txt", mimeType: "text/plain", buffer: Buffer.from(`строка файла ${marker}\n`) },
    { name: "big.txt", mimeType: "text/plain", buffer: Buffer.alloc(1024 * 1024 + 1, 97) },
  ]);
  const files = p.getByRole("list", { name: "Вложения" });
  await files.getByText("Загружен").waitFor(WAIT);
  assert.match(await files.getByRole("alert").innerText(), /отклонён: файл больше 1 МБ/);
  // Dropped on the chat.
  await log(p).evaluate((el) => {
    const dt = new DataTransfer();
    dt.items.add(new File(["вторая строка\n"], "dropped.txt", { type: "text/plain" }));
    el.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
    el.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
  });
  await until("both uploaded", async () => (await files.getByText("Загружен").count()) === 2);
  await checkState(p, "d06-attachments");
  await files.getByRole("button", { name: "Убрать файл big.txt" }).click();
  await send(p, "прочитай файл");
  await idle(p);
  const conv = await newest("alice");
  const stored = (await api("alice", `/api/assistant/history?conversation_id=${conv.id}`)).body.items;
  const user = stored.find((m) => m.role === "user");
  assert.ok(user.content.includes(`[file note.txt]\nстрока файла ${marker}`), user.content);
  assert.ok(user.content.includes("[file dropped.txt]\nвторая строка"), user.content);
  assert.match(await you(p).last().innerText(), /📎 note\.txt/);
  await p.close();
});

test("A silent cut (nothing flows, nothing closes) is noticed by the missed heartbeats within " +
     "40 s, and the run is rejoined whole", async () => {
  const p = await open();
  await p.getByRole("button", { name: "Начать новый диалог" }).click();
  await send(p, "echo 200 words");
  const answer = assistant(p).last();
  await until("the stream under way", async () => words(await answer.innerText()) >= 5);
  const cut = Date.now();
  proxy.silence();
  await dot(p, "Нет соединения").waitFor({ timeout: 45_000 });
  const noticed = (Date.now() - cut) / 1000;
  console.log(`silent cut noticed after ${noticed.toFixed(1)} s`);
  assert.ok(noticed < 40, `noticed after ${noticed} s`);
  await checkState(p, "d07-silent-cut-noticed");
  proxy.speak();
  const conv = await newest("alice");
  const stored = async () => (await api("alice", `/api/assistant/history?conversation_id=${conv.id}`))
    .body.items.filter((m) => m.role === "assistant").at(-1);
  await until("the run finished in the agent", async () => words((await stored())?.content ?? "") >= 200, 60_000);
  await dot(p, "Подключено").waitFor({ timeout: 60_000 });
  const last = (await stored()).content.trim().split(/\s+/).at(-1);
  await until("the rejoined run's whole text", async () =>
    (await answer.innerText()).includes(last) && words(await answer.innerText()) >= 200, 60_000);
  await idle(p);
  await p.close();
});

test("Stop on a rejoined run: a reloaded tab follows its run and stops it (by run_id)", async () => {
  const p = await open();
  await p.getByRole("button", { name: "Начать новый диалог" }).click();
  await sandbox("/api/sandbox/faults", { operation: "search_dashboards", delay_s: 20 });
  await send(p, "найди дашборды про отчёты");
  await p.getByRole("group", { name: "Инструмент: Поиск дашбордов" }).last().waitFor(WAIT);
  const conv = await newest("alice");
  await p.reload(); // the same tab (its tab_id survives in sessionStorage): no submission to cancel
  await p.getByRole("combobox", { name: "Демо-пользователь" }).selectOption("alice");
  await convButton(p, conv.title).first().click();
  await stopBtn(p).waitFor(WAIT); // joined: streaming, with Stop
  await checkState(p, "d08-rejoined-streaming");
  const started = Date.now();
  await stopBtn(p).click();
  await idle(p);
  await until("the run cancelled in the agent", async () =>
    (await api("alice", `/api/agent/conversations/${conv.id}/active`)).body.run?.status === "cancelled");
  assert.ok(Date.now() - started < 15_000, "stopped before the slow tool answered");
  const calls = (await api("alice", `/api/assistant/history?conversation_id=${conv.id}`)).body.items
    .flatMap((m) => m.tool_calls);
  assert.equal(calls.at(-1).outcome, "cancelled");
  await sandbox("/api/sandbox/reset", {});
  await p.close();
});

test("Words: the card's risk level in the user's language", async () => {
  const p = await open();
  await p.getByRole("button", { name: "Начать новый диалог" }).click();
  await send(p, "задеплой дашборд 42 в прод");
  const card = p.getByRole("alertdialog", { name: "⏸️ Требуется подтверждение" });
  await card.waitFor(WAIT);
  const text = await card.innerText();
  assert.match(text, /Уровень: с осторожностью/);
  assert.match(text, /Риск: запись/);
  assert.doesNotMatch(text, /guarded|write\b/);
  await checkState(p, "d09-card-words");
  await card.getByRole("button", { name: "Отклонить" }).click();
  await idle(p);
  await p.close();
});
