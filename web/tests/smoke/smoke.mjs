// A manual smoke run of the page in headless Chromium against serve.py (not the browser test
// suite: H-ui's tests own that). Prints what it saw; screenshots to $SHOTS.
import { createRequire } from "node:module";
const require = createRequire(new URL("../../../tests/js/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const URL_ = process.argv[2] ?? "http://127.0.0.1:8765/api/agent/ui/";
const SHOTS = process.env.SHOTS ?? "/tmp/web-shots";
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu"] });
const page = await (await browser.newContext({ locale: "ru-RU", viewport: { width: 1100, height: 800 } })).newPage();
page.on("console", (m) => { if (m.type() === "error" || m.type() === "warning") console.log("console:", m.type(), m.text()); });
page.on("pageerror", (e) => console.log("pageerror:", e.message));
import { readFileSync } from "node:fs";
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");
// Each screenshot also runs axe-core on the page; serious and critical violations are printed.
const shot = async (n) => {
  await page.screenshot({ path: `${SHOTS}/${n}.png` });
  await page.evaluate(AXE);
  const res = await page.evaluate(() => globalThis.axe.run());
  console.log(`axe ${n}: ${res.passes.length} rules pass, ${res.violations.length} violations (${res.violations.map((v) => v.impact + " " + v.id).join(", ")})`);
  for (const v of res.violations.filter((v) => v.impact === "serious" || v.impact === "critical")) {
    console.log(`axe ${n}: ${v.impact} ${v.id}: ${v.nodes.map((x) => x.target.join(" ")).join(", ")}`);
  }
};
const t0 = Date.now();
const step = (s) => console.log(`${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);

await page.goto(URL_);
await page.getByRole("region", { name: "Новый диалог" }).waitFor();
await page.getByRole("status", { name: "Подключено" }).waitFor();
step("welcome + connected"); await shot("01-welcome");
await page.getByRole("region", { name: "Новый диалог" }).getByRole("button", { name: "Найди дашборды про энергопотребление" }).click();
await page.getByRole("button", { name: "Остановить" }).waitFor();
step("streaming: Stop shown");
await page.getByRole("button", { name: "Отправить" }).waitFor({ timeout: 20000 });
await page.getByRole("group", { name: "Инструмент: Поиск дашбордов" }).getByRole("img", { name: "Готово" }).waitFor();
step("tool done, idle"); await shot("02-tool");
await page.getByRole("textbox", { name: "Сообщение" }).fill("задеплой дашборд 42 в прод");
await page.getByRole("button", { name: "Отправить" }).click();
const card = page.getByRole("alertdialog");
await card.waitFor({ timeout: 20000 });
step("card: " + (await card.getByRole("timer").textContent()) + " / " + (await card.textContent()).slice(0, 160));
await shot("03-card");
await card.getByRole("button", { name: "Подтвердить" }).click();
await page.getByText("▶️ Подтверждено").waitFor();
await page.getByRole("button", { name: "Отправить" }).waitFor({ timeout: 20000 });
step("confirmed; log aria-busy=" + await page.getByRole("log").getAttribute("aria-busy")); await shot("04-confirmed");
await page.getByRole("textbox", { name: "Сообщение" }).fill("удали дашборд 10 в ss-dev");
await page.getByRole("button", { name: "Отправить" }).click();
await page.getByRole("alertdialog").waitFor({ timeout: 20000 });
const disabled = await page.getByRole("alertdialog").getByRole("button", { name: "Подтвердить" }).isDisabled();
step("dangerous card, confirm disabled=" + disabled); await shot("05-dangerous");
await page.getByRole("alertdialog").getByRole("button", { name: "Отклонить" }).click();
await page.getByText("⏹️ Отклонено").waitFor();
await page.getByRole("textbox", { name: "Сообщение" }).fill("привет and echo 150 words");
await page.getByRole("button", { name: "Отправить" }).click();
await page.getByRole("button", { name: "Остановить" }).waitFor();
await page.waitForTimeout(1200);
await page.getByRole("button", { name: "Остановить" }).click();
await page.getByText("(ответ прерван)").waitFor();
step("stopped, partial kept"); await shot("06-stopped");
const items = await page.getByRole("navigation", { name: "Диалоги" }).getByRole("listitem").count();
step("conversations listed: " + items);
await page.getByRole("button", { name: "Начать новый диалог" }).click();
await page.getByRole("region", { name: "Новый диалог" }).waitFor();
await page.getByRole("navigation", { name: "Диалоги" }).getByRole("button", { name: "Найди дашборды про энергопотребление" }).first().click();
await page.getByRole("article", { name: "Ассистент" }).first().waitFor();
step("history reopened"); await shot("07-history");
await browser.close();
