// Issue 34, the requester's card when someone else must approve it (docs/protocol.md §11), in
// headless Chromium against the real stack (tests/system/test_approvals.py starts it, with
// prod deploys approved by `approver` or `admin`): "waiting for approval" with the roles, no
// Confirm, "Cancel the request" that closes it; axe-core clean, no CSP violation.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { WAIT, checkState, dot, env, input, launch, openPage, sendBtn } from "./lib.mjs";

const AGENT = env("AGENT_URL");
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
