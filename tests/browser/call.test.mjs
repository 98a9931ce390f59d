// A stored MCP call's page (calls/{call_id}, the approve_url an MCP client shows; docs/protocol.md
// §12) in headless Chromium against the real stack (test_call_page.py makes the call): someone
// else learns nothing, the requester sees what the call does and confirms it once, and a second
// look finds it closed. axe-core clean, no CSP violation, in every state.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { WAIT, checkState, env, launch, openPage } from "./lib.mjs";

const CALL_URL = env("CALL_URL");
const PROMPT = env("CALL_PROMPT");
const demoUser = (p) => p.getByRole("combobox", { name: "Демо-пользователь" });
let browser;

before(async () => { browser = await launch("ru-RU"); });
after(async () => { await browser?.close(); });

test("someone else's call is not found; its requester confirms it once", async () => {
  const page = await openPage(browser, CALL_URL, { clock: false });
  await demoUser(page).selectOption("bob");
  await page.getByRole("alert").filter({ hasText: "Такого запроса нет, или он не ваш." }).waitFor(WAIT);
  assert.equal(await page.getByText(PROMPT, { exact: true }).count(), 0);
  await checkState(page, "call-not-found");

  await demoUser(page).selectOption("alice");
  await page.getByText(PROMPT, { exact: true }).waitFor(WAIT);
  await page.getByText("ждёт вашего ответа").waitFor(WAIT);
  await page.getByText("deploy_dashboard", { exact: true }).waitFor(WAIT);
  await checkState(page, "call-pending");
  await page.getByRole("button", { name: "Подтвердить" }).click();
  await page.getByText(/^(выполняется|выполнен)$/).waitFor(WAIT);
  assert.equal(await page.getByRole("button", { name: "Подтвердить" }).count(), 0);
  await page.getByRole("status").filter({ hasText: "На этот запрос уже нельзя ответить." }).waitFor(WAIT);
  await checkState(page, "call-confirmed");
  await page.close();
});

test("a second look: closed, no button, the result once done", async () => {
  const page = await openPage(browser, CALL_URL, { clock: false });
  await demoUser(page).selectOption("alice");
  await page.getByText(PROMPT, { exact: true }).waitFor(WAIT);
  await page.getByRole("status").filter({ hasText: "На этот запрос уже нельзя ответить." }).waitFor(WAIT);
  assert.equal(await page.getByRole("button", { name: "Подтвердить" }).count(), 0);
  assert.equal(await page.getByRole("button", { name: "Отклонить" }).count(), 0);
  // The confirmation answered once the call had run: done, with ss-tools' answer.
  await page.getByText("выполнен", { exact: true }).waitFor(WAIT);
  await page.getByRole("heading", { level: 3, name: "Результат" }).waitFor(WAIT);
  assert.match(await page.locator("pre").textContent(), /"dashboard_id": 42/);
  await checkState(page, "call-closed");
  await page.close();
});
