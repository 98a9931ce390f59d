// Issue 34, the requester's card when someone else must approve it (docs/protocol.md §11), in
// headless Chromium against the real stack (tests/system/test_approvals.py starts it, with
// prod deploys approved by `approver` or `admin`): "waiting for approval" with the roles, no
// Confirm, "Cancel the request" that closes it; then the approvals pages (approvals/ and
// approvals/{id}, the card's approve_url): the requester's own page offers no Approve, the
// approver (dave) finds it in his inbox, sees the context and approves, and the requester's
// tab, still open on the card, follows the run the approval started (no reload) to the deploy
// done. axe-core clean, no CSP violation, in every state.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { WAIT, checkState, dot, env, input, launch, noProblems, openPage, sendBtn } from "./lib.mjs";

const AGENT = env("AGENT_URL");
const demoUser = (p) => p.getByRole("combobox", { name: "Демо-пользователь" });
let browser;

before(async () => { browser = await launch("ru-RU"); });
after(async () => { await browser?.close(); });

test("a prod deploy waits for someone else's approval; the requester may only cancel", async () => {
  const p = await openPage(browser, AGENT + "/api/agent/ui/", { clock: false });
  await p.getByRole("region", { name: "AgentChat" }).waitFor(WAIT);
  await p.getByRole("combobox", { name: "Демо-пользователь" }).selectOption("alice");
  await dot(p, "Подключено").waitFor(WAIT);
  await input(p).fill("задеплой дашборд 42 в прод");
  await sendBtn(p).click();
  const card = p.getByRole("alertdialog");
  await card.waitFor(WAIT);
  await card.getByText("Ждёт одобрения другого человека (approver, admin).").waitFor(WAIT);
  assert.equal(await card.getByRole("button", { name: "Подтвердить" }).count(), 0);
  const cancel = card.getByRole("button", { name: "Отменить запрос" });
  assert.ok(await cancel.isEnabled());
  await checkState(p, "approval-waiting");
  await cancel.click();
  await p.getByText("⏹️ Отклонено").waitFor(WAIT);
  await checkState(p, "approval-cancelled");
});

test("the approver opens the card's link, sees the context and approves; the requester's conversation runs it", async () => {
  const chat = await openPage(browser, AGENT + "/api/agent/ui/", { clock: false });
  await chat.getByRole("region", { name: "AgentChat" }).waitFor(WAIT);
  await demoUser(chat).selectOption("alice");
  await dot(chat, "Подключено").waitFor(WAIT);
  await input(chat).fill("задеплой дашборд 42 в прод");
  await sendBtn(chat).click();
  const card = chat.getByRole("alertdialog");
  await card.waitFor(WAIT);
  const prompt = (await chat.locator(`#${await card.getAttribute("aria-describedby")}`).textContent()).trim();
  const link = card.getByRole("link", { name: "Страница одобрения (ссылка для одобряющего)" });
  const approveUrl = new URL(await link.getAttribute("href"), AGENT).href;
  const id = approveUrl.split("/").pop();

  // The requester on her own approval's page: the context, and no Approve but a clear note.
  const own = await openPage(browser, approveUrl, { clock: false });
  await demoUser(own).selectOption("alice");
  await own.getByText("Это ваш собственный запрос: одобрить его должен другой человек.").waitFor(WAIT);
  assert.equal(await own.getByRole("button", { name: "Одобрить" }).count(), 0);
  await noProblems(own); // the same page as below, where axe runs
  await own.close();

  // dave, approver@prod: his inbox lists it (pending first); its page shows the context.
  const page = await openPage(browser, AGENT + "/api/agent/ui/approvals/", { clock: false });
  await demoUser(page).selectOption("dave");
  await page.getByRole("heading", { level: 2, name: "Ждут ответа" }).waitFor(WAIT);
  const item = page.locator(`a[href$="/approvals/${id}"]`);
  await item.waitFor(WAIT);
  await checkState(page, "approvals-inbox");
  await item.click();
  assert.equal(page.url(), approveUrl);
  const heading = page.getByRole("heading", { level: 2 });
  await page.getByText(prompt, { exact: true }).waitFor(WAIT);
  assert.equal(await heading.evaluate((h) => document.activeElement === h), true, "the heading has the focus");
  const args = await page.locator("pre").textContent();
  assert.match(args, /"dashboard_id": 42/);
  await page.getByText("Автор запроса").waitFor(WAIT);
  await page.getByText("approver, admin").waitFor(WAIT);
  await page.getByText("Одобрений: 0 из 1").waitFor(WAIT);
  // The rule allows grants (up to 60 minutes): offered, left empty.
  await page.getByRole("spinbutton", { name: /минут \(до 60/ }).waitFor(WAIT);
  await checkState(page, "approval-context");
  await page.getByRole("textbox", { name: "Комментарий (необязательно)" }).fill("change 1234");
  await page.getByRole("button", { name: "Одобрить" }).click();
  await page.getByRole("status").filter({ hasText: "Одобрено: запрос выполняется в диалоге автора." }).waitFor(WAIT);
  await page.getByText("dave: одобрил(а)").waitFor(WAIT);
  assert.equal(await page.getByRole("button", { name: "Одобрить" }).count(), 0);
  await checkState(page, "approval-approved");

  // The requester's tab, still open on the waiting card, follows the run the approval
  // started (its /active poll finds it): confirmed, and the deploy done, with no reload.
  await chat.getByText("▶️ Подтверждено").waitFor(WAIT);
  await chat.getByRole("group", { name: "Инструмент: Деплой дашборда" })
    .getByRole("img", { name: "Готово" }).waitFor(WAIT);
  await noProblems(chat);
  await chat.close();
});
