// The built-in page at the mount path, driven in headless Chromium (Debian's /usr/bin/chromium)
// with playwright-core, as a person would use it: example chips, an answer with a collapsible
// tool message, the confirmation card with its countdown, and the permission-denied card.
// The page's own words follow the browser's language (ru-RU here; one test in en-US), the
// server's words the message's: tool messages carry the tools' titles, the card its prompt.
// Screenshots of every step go to PAGE_SHOTS (tests/agent/test_page.py passes its tmp dir).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { env, sandbox, sleep } from "./lib.mjs";

const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const SHOTS = process.env.PAGE_SHOTS ?? mkdtempSync(join(tmpdir(), "agentchat-page-"));
const WAIT = { timeout: 60_000 }; // generous: a loaded 2-core machine runs other stacks too

let browser;
let english; // a second browser, en-US
let userDataDir;

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  userDataDir = mkdtempSync(join(tmpdir(), "agentchat-chromium-"));
  // A persistent context is how playwright passes a fresh, empty --user-data-dir.
  browser = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM, args: ARGS, headless: true,
    viewport: { width: 1100, height: 1100 }, locale: "ru-RU",
  });
  english = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "agentchat-en-")), {
    executablePath: CHROMIUM, args: ARGS, headless: true,
    viewport: { width: 1100, height: 1100 }, locale: "en-US",
  });
});

after(async () => {
  await browser?.close();
  await english?.close();
});

async function openPage(user = "alice", context = browser) {
  const page = await context.newPage();
  page.on("pageerror", (err) => console.log(`page error: ${err.message}`));
  await page.goto(env("GRADIO_URL"));
  await page.locator("#agentchat-chatbot").waitFor(WAIT);
  if (user !== "alice") {
    // Another user clears the page (a round trip that also empties the input box): the text
    // typed here is gone once it has landed. A message sent before that was cleared with it
    // under load (the user message never showed).
    await page.locator("#agentchat-input textarea").fill("(switching users)");
    await page.locator("#agentchat-user input").click();
    await page.locator(`#agentchat-user [role=option][aria-label="${user}"]`).click();
    await page.waitForFunction(
      (u) => document.querySelector("#agentchat-user input")?.value === u, user, WAIT);
    await page.waitForFunction(
      () => document.querySelector("#agentchat-input textarea")?.value === "", null, WAIT);
  }
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

async function send(page, text) {
  await page.locator("#agentchat-input textarea").fill(text);
  await page.locator("#agentchat-send").click();
  await page.locator('#agentchat-chatbot [data-testid="user"]', { hasText: text }).last()
    .waitFor(WAIT);
}

// A collapsible tool message whose title names the tool.
const toolMessage = (page, tool) =>
  page.locator("#agentchat-chatbot .thought-group").filter({
    has: page.locator(".title", { hasText: tool }),
  });

// A plain agent message (not a tool message) with this text.
const agentSays = (page, text) =>
  page.locator('#agentchat-chatbot .message:not(.thought) [data-testid="bot"]')
    .filter({ hasText: text });

async function waitToolDone(page, tool, done = "готово") {
  const msg = toolMessage(page, tool).last();
  await msg.locator(".title .duration", { hasText: done }).waitFor(WAIT);
  assert.equal(await msg.locator(".loading-spinner").count(), 0, "a done tool has no spinner");
  return msg;
}

// Open a tool message; it slides open, so wait for the slide before a screenshot.
async function openTool(tool) {
  await tool.locator(".title").click();
  await tool.locator(".content").getByText("Результат").waitFor(WAIT);
  await sleep(600);
}

async function countdownSeconds(page) {
  const text = await page.locator("#card-countdown").innerText();
  const m = text.match(/(\d\d):(\d\d)/);
  assert.ok(m, `a mm:ss countdown, got ${JSON.stringify(text)}`);
  return Number(m[1]) * 60 + Number(m[2]);
}

test("a new conversation shows the example chips; a chip fills the input", async () => {
  const page = await openPage();
  const chips = page.locator("#agentchat-chatbot button.example");
  await chips.first().waitFor(WAIT);
  assert.ok((await chips.count()) >= 3, "several starter prompts");
  await shot(page, "01-new-conversation");
  await chips.filter({ hasText: "Что ты умеешь?" }).click();
  await page.waitForFunction(
    () => document.querySelector("#agentchat-input textarea")?.value === "Что ты умеешь?",
    null, WAIT);
  await page.close();
});

test("a search answers with a collapsible tool message titled «Поиск дашбордов», done", async () => {
  await sandbox("/api/sandbox/reset", {});
  const page = await openPage();
  await send(page, "найди дашборды про энергопотребление");
  await agentSays(page, "Отчёт по энергопотреблению").last().waitFor(WAIT);
  const tool = await waitToolDone(page, "Поиск дашбордов");
  assert.match(await page.locator("#agentchat-conversation textarea").inputValue(),
               /^[0-9a-f-]{36}$/, "the page shows the new conversation's id");
  assert.equal(await page.locator("#agentchat-card").isVisible(), false, "no card for a read");
  await shot(page, "02-search-answer");
  // Collapsed until clicked (once done; it was open while pending, and Gradio slides it shut,
  // so the content leaves the page at the slide's end); open, it shows the input and result.
  await tool.locator(".content").waitFor({ state: "detached", ...WAIT });
  await openTool(tool);
  await tool.locator(".content").getByText("Вход").waitFor(WAIT);
  await tool.locator(".content").getByText('"id": 42').first().waitFor(WAIT);
  await shot(page, "03-tool-message-open");
  await page.close();
});

test("deploy to prod: the card with Confirm, Deny and a countdown; Confirm runs it", async () => {
  await sandbox("/api/sandbox/reset", {});
  const page = await openPage();
  await send(page, "задеплой дашборд 42 в прод");
  const card = page.locator("#agentchat-card");
  await card.waitFor({ state: "visible", ...WAIT });
  // The server's prompt names the dashboard by the title the prefetch read.
  await card.getByText("Задеплоить дашборд «Отчёт по энергопотреблению» (№42) в prod?").first()
    .waitFor(WAIT);
  assert.equal(await card.getByText("deploy_dashboard").count(), 0, "no machine name");
  assert.equal((await page.locator("#card-confirm").innerText()).trim(), "Подтвердить");
  assert.equal((await page.locator("#card-deny").innerText()).trim(), "Отклонить");
  assert.ok(await page.locator("#card-confirm").isVisible());
  const first = await countdownSeconds(page);
  assert.ok(first > 200 && first <= 300, `about 5 minutes left, got ${first} s`);
  await shot(page, "04-confirm-card");
  // The countdown ticks from the card's expires_at.
  await page.waitForFunction(
    (s) => {
      const m = document.querySelector("#card-countdown")?.innerText.match(/(\d\d):(\d\d)/);
      return m && Number(m[1]) * 60 + Number(m[2]) < s;
    }, first, WAIT);
  assert.ok(await countdownSeconds(page) < first);
  assert.equal(await toolMessage(page, "Деплой дашборда").count(), 0, "nothing runs before");

  await page.locator("#card-confirm").click();
  await card.waitFor({ state: "hidden", ...WAIT });
  await agentSays(page, "Подтверждено").waitFor(WAIT);
  const tool = await waitToolDone(page, "Деплой дашборда");
  await openTool(tool);
  // The answer names the deploy task the ss-tools API queued.
  await agentSays(page, /task-[0-9a-f]+/).last().waitFor(WAIT);
  await shot(page, "05-confirmed-deploy");
  await page.close();
});

test("deploy to prod as carol: the permission-denied card, Close, then alternatives", async () => {
  await sandbox("/api/sandbox/reset", {});
  const page = await openPage("carol");
  await send(page, "задеплой дашборд 42 в прод");
  const card = page.locator("#agentchat-card");
  await card.waitFor({ state: "visible", ...WAIT });
  await card.getByText("Недостаточно прав на «Деплой дашборда» в prod: нужна роль").waitFor(WAIT);
  const alternatives = card.locator("#card-text li");
  assert.ok((await alternatives.count()) >= 1, "the card lists the alternatives");
  const firstAlternative = (await alternatives.first().innerText()).trim();
  assert.equal(await page.locator("#card-confirm").isVisible(), false, "cannot be confirmed");
  assert.equal((await page.locator("#card-deny").innerText()).trim(), "Закрыть");
  assert.equal((await page.locator("#card-countdown").innerText()).trim(), "");
  await shot(page, "06-permission-denied-card");

  await page.locator("#card-deny").click();
  await card.waitFor({ state: "hidden", ...WAIT });
  await agentSays(page, "Отклонено").waitFor(WAIT);
  // The agent's message offers the alternatives the card listed.
  const offer = agentSays(page, firstAlternative.replace(/\s*\(.*$/, "")).last();
  await offer.waitFor(WAIT);
  assert.equal(await toolMessage(page, "Деплой дашборда").count(), 0, "the deploy never ran");
  await sleep(300);
  await shot(page, "07-permission-denied-closed");
  await page.close();
});

test("an English browser: the page's words in English, the server's in the message's language",
  async () => {
    await sandbox("/api/sandbox/reset", {});
    const page = await openPage("alice", english);
    assert.equal((await page.locator("#agentchat-send").innerText()).trim(), "Send");
    // An English message: the card's prompt and the tool messages in English too.
    await send(page, "Deploy dashboard 42 to prod");
    const card = page.locator("#agentchat-card");
    await card.waitFor({ state: "visible", ...WAIT });
    await card.getByText("Deploy dashboard “Energy consumption report” (#42) to prod?").first()
      .waitFor(WAIT);
    assert.equal((await page.locator("#card-confirm").innerText()).trim(), "Confirm");
    assert.match(await page.locator("#card-countdown").innerText(), /\d\d:\d\d\*{0,2} left/);
    await waitToolDone(page, "Dashboard summary", "done");
    await page.locator("#card-deny").click();
    await card.waitFor({ state: "hidden", ...WAIT });
    await agentSays(page, "Denied").waitFor(WAIT);
    await agentSays(page, "you declined it").waitFor(WAIT);
    await shot(page, "08-english-denied");
    // A Russian message in the same English page: the server answers in Russian.
    await send(page, "задеплой дашборд 42 в прод");
    await card.waitFor({ state: "visible", ...WAIT });
    await card.getByText("Задеплоить дашборд «Отчёт по энергопотреблению» (№42) в prod?").first()
      .waitFor(WAIT);
    assert.equal((await page.locator("#card-deny").innerText()).trim(), "Deny");
    await page.locator("#card-deny").click();
    await agentSays(page, "вы его отклонили").waitFor(WAIT);
    await shot(page, "09-english-page-russian-turn");
    await page.close();
  });

// Issue 31, hole 4: text someone else wrote (here an ss-tools maintenance window's reason, which
// any ss-dev writer sets) reaches the model's answer and the tool message. It shows as text:
// no image or link to another origin in the page, no request leaves it, and the page's
// responses carry a strict Content-Security-Policy.
async function plantMaintenance(reason) {
  const tok = await fetch(env("SANDBOX_URL") + "/api/auth/service-token", {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ client_id: "agentchat-agent", client_secret: env("SANDBOX_CLIENT_SECRET") }),
  }).then((r) => r.json());
  const resp = await fetch(env("SANDBOX_URL") + "/api/maintenance", {
    method: "POST",
    headers: { Authorization: `Bearer ${tok.access_token}`, "X-User-JWT": env("TOKEN_BOB"),
               "Idempotency-Key": `plant-${Date.now()}`, "content-type": "application/json" },
    body: JSON.stringify({ env_id: "ss-dev", reason, duration_minutes: 60 }),
  });
  assert.ok(resp.ok, `planting the reason: ${resp.status}`);
}

test("text from ss-tools shows as text: no image or link to another origin, a strict CSP",
  async () => {
    await sandbox("/api/sandbox/reset", {});
    const evil = "http://127.0.0.1:9";
    await plantMaintenance(`![x](${evil}/l.png?d=1) [Подтвердить](${evil}/e) <img src=${evil}/h>`);
    const page = await browser.newPage();
    const origin = new URL(env("GRADIO_URL")).origin;
    const foreign = [];
    page.on("request", (r) => {
      if (!r.url().startsWith("data:") && new URL(r.url()).origin !== origin) foreign.push(r.url());
    });
    const resp = await page.goto(env("GRADIO_URL"));
    const csp = resp.headers()["content-security-policy"] ?? "";
    for (const directive of ["img-src 'self' data:", "connect-src 'self'", "frame-ancestors 'none'",
                             "default-src 'self'"]) {
      assert.ok(csp.includes(directive), `${directive} in ${csp}`);
    }
    const scripts = /script-src ([^;]*)/.exec(csp)?.[1] ?? "";
    assert.ok(!scripts.includes("unsafe-inline"), scripts);
    await page.locator("#agentchat-chatbot").waitFor(WAIT);
    await send(page, "покажи окна обслуживания в ss-dev");
    await waitToolDone(page, "Окна обслуживания");
    // The control: the planted text itself is there, as the characters it is, in the answer
    // (the tool's log message holds it too, in its JSON: under load it can still be on
    // screen as a message of its own, so the answer is found by its own words).
    await agentSays(page, "причина «![x](").waitFor(WAIT);
    await shot(page, "10-hostile-markdown-as-text");
    const links = await page.evaluate(() => [...document.querySelectorAll(
      "#agentchat-chatbot img, #agentchat-chatbot a, #agentchat-card a")]
      .map((e) => e.getAttribute("src") ?? e.getAttribute("href") ?? ""));
    assert.deepEqual(links.filter((u) => u.includes("127.0.0.1:9")), [], "no image or link");
    assert.deepEqual(foreign, [], "no request left the page's origin");
    await page.close();
  });
