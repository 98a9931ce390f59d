// Issue 35, edit and regenerate, in headless Chromium against the real stack: a message just
// sent has its edit and regenerate buttons without a reload, and its answer regenerated there
// (`2/2`); reopened, a stored user message edited in place (`3/3`), the picker flipped back by
// keyboard alone, the last answer regenerated (`4/4`). Each new state: a screenshot, axe-core (0 serious or critical), no CSP
// violation. Found by role and accessible name, as panel.test.mjs does.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { WAIT, assistant, checkState, dot, env, input, launch, log, openPage, sendBtn, stopBtn, until, you } from "./lib.mjs";

const AGENT = env("AGENT_URL");
let browser;

before(async () => {
  browser = await launch("ru-RU");
});

after(async () => {
  await browser?.close();
});

async function idle(p) {
  await until("idle", async () => (await log(p).getAttribute("aria-busy")) !== "true" &&
    (await sendBtn(p).count()) === 1 && (await stopBtn(p).count()) === 0);
}

async function send(p, text) {
  await input(p).fill(text);
  await sendBtn(p).click();
  await you(p).filter({ hasText: text }).last().waitFor(WAIT);
  await idle(p);
}

test("Branches: regenerate a message just sent, edit a stored one, flip the versions by keyboard, regenerate", async () => {
  const p = await openPage(browser, AGENT + "/api/agent/ui/", { clock: false });
  await p.getByRole("region", { name: "AgentChat" }).waitFor(WAIT);
  await p.getByRole("combobox", { name: "Демо-пользователь" }).selectOption("alice");
  await dot(p, "Подключено").waitFor(WAIT);
  const tag = `ветки ${Date.now()}`;
  await send(p, `${tag} привет and echo 3 words`);
  // Sent in this view, no reload: once the turn is stored its buttons come (history read quietly).
  await you(p).nth(0).getByRole("button", { name: "Изменить сообщение" }).waitFor(WAIT);
  await assistant(p).last().getByRole("button", { name: "Ответить заново" }).waitFor(WAIT);
  await send(p, "привет and echo 5 words");
  await you(p).nth(1).getByRole("button", { name: "Изменить сообщение" }).waitFor(WAIT);
  await assistant(p).last().getByRole("button", { name: "Ответить заново" }).click();
  await until("two versions", async () => (await p.getByLabel("Версия 2 из 2").count()) === 1);
  await idle(p);
  assert.match(await assistant(p).last().innerText(), /w4/);
  await checkState(p, "b00-regenerated-in-view");
  // Reopened from the list, its messages are stored: each can be edited or answered again.
  await p.getByRole("list", { name: "Список диалогов" })
    .getByRole("button", { name: `${tag} привет and echo 3 words`, exact: true }).click();
  await you(p).nth(1).getByRole("button", { name: "Изменить сообщение" }).waitFor(WAIT);
  assert.equal(await assistant(p).getByRole("button", { name: "Ответить заново" }).count(), 2);

  await you(p).nth(1).getByRole("button", { name: "Изменить сообщение" }).click();
  const box = p.getByRole("textbox", { name: "Новый текст сообщения" });
  assert.equal(await box.inputValue(), "привет and echo 5 words");
  await checkState(p, "b01-editing");
  await box.fill("привет and echo 7 words");
  await p.getByRole("button", { name: "Отправить изменённое" }).click();
  const versions = p.getByRole("group", { name: "Версии сообщения" });
  await until("three versions", async () => (await p.getByLabel("Версия 3 из 3").count()) === 1);
  await idle(p);
  assert.match(await assistant(p).last().innerText(), /w6/);
  await checkState(p, "b02-edited");

  // Keyboard only: from the edit button, back (Shift+Tab) over the disabled «next version»
  // to «previous version», Enter.
  const prev = versions.getByRole("button", { name: "Предыдущая версия" });
  assert.equal(await versions.getByRole("button", { name: "Следующая версия" }).isDisabled(), true);
  await you(p).nth(1).getByRole("button", { name: "Изменить сообщение" }).focus();
  await p.keyboard.press("Shift+Tab");
  assert.equal(await prev.evaluate((el) => el === document.activeElement), true, "reachable by Tab");
  await p.keyboard.press("Enter");
  await until("the regenerated branch", async () => (await p.getByLabel("Версия 2 из 3").count()) === 1);
  assert.match(await assistant(p).last().innerText(), /w4/);
  assert.equal(await you(p).nth(1).innerText().then((t) => t.includes("echo 5 words")), true);

  await assistant(p).last().getByRole("button", { name: "Ответить заново" }).click();
  await until("four versions", async () => (await p.getByLabel("Версия 4 из 4").count()) === 1);
  await idle(p);
  assert.match(await assistant(p).last().innerText(), /w4/);
  await checkState(p, "b03-regenerated");
  await p.close();
});
