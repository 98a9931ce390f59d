// Manual check of the recovery rows in Chromium: the page reaches serve.py through a TCP proxy
// this script controls; cut it mid-answer → red dot and countdown; restore → green, and the run
// that went on meanwhile is rejoined with its whole text.
import net from "node:net";
import { createRequire } from "node:module";
const require = createRequire(new URL("../../../tests/js/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const UP = Number(process.argv[2] ?? 8765);
const SHOTS = process.env.SHOTS ?? "/tmp/web-shots";
let open = true;
const sockets = new Set();
const proxy = net.createServer((c) => {
  if (!open) return c.destroy();
  const u = net.connect(UP, "127.0.0.1");
  sockets.add(c); sockets.add(u);
  c.pipe(u); u.pipe(c);
  const end = () => { c.destroy(); u.destroy(); sockets.delete(c); sockets.delete(u); };
  c.on("error", end); u.on("error", end); c.on("close", end); u.on("close", end);
});
await new Promise((r) => proxy.listen(0, "127.0.0.1", r));
const port = proxy.address().port;
const cut = () => { open = false; for (const s of sockets) s.destroy(); sockets.clear(); };

const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
const page = await (await browser.newContext({ locale: "ru-RU" })).newPage();
const CLOCK = process.env.CLOCK === "1"; // as the browser tests do: Playwright's clock, jumped
if (CLOCK) await page.clock.install();
page.on("console", (m) => { if (m.type() === "error") console.log("console:", m.text().slice(0, 200)); });
page.on("pageerror", (e) => console.log("pageerror:", e.message));
const t0 = Date.now();
const step = (s) => console.log(`${((Date.now() - t0) / 1000).toFixed(1)}s ${s}`);
await page.goto(`http://127.0.0.1:${port}/api/agent/ui/`);
await page.getByRole("status", { name: "Подключено" }).waitFor();
await page.getByRole("button", { name: "Начать новый диалог" }).click();
await page.getByRole("textbox", { name: "Сообщение" }).fill("привет and echo 200 words");
await page.getByRole("button", { name: "Отправить" }).click();
await page.getByRole("button", { name: "Остановить" }).waitFor();
await page.waitForTimeout(1500);
cut();
step("cut");
await page.getByRole("status", { name: "Нет соединения" }).waitFor({ timeout: 10000 });
const banner = page.getByRole("alert").filter({ hasText: "Агент недоступен" });
await banner.waitFor();
step("red dot; banner: " + await banner.textContent());
await page.screenshot({ path: `${SHOTS}/10-disconnected.png` });
if (CLOCK) {
  await page.clock.runFor(5000);
  await page.waitForTimeout(500);
  step("after runFor 5 s: " + await banner.textContent());
  await page.waitForTimeout(7000); // the run finishes in the agent meanwhile
} else {
  await page.waitForTimeout(6000);
  step("after 6 s: " + await banner.textContent());
}
open = true;
if (CLOCK) await page.clock.runFor(5000);
step("restored");
await page.getByRole("status", { name: "Подключено" }).waitFor({ timeout: 15000 });
step("green");
await page.getByRole("button", { name: "Отправить" }).waitFor({ timeout: 20000 });
const text = await page.getByRole("article", { name: "Ассистент" }).last().innerText();
const words = text.match(/w\d+/g) ?? [];
step(`rejoined: ${words.length} words, first ${words[0]}, last ${words.at(-1)}, in order: ${words.every((w, i) => w === "w" + i)}`);
await page.screenshot({ path: `${SHOTS}/11-rejoined.png` });
await browser.close();
proxy.close();
