// The bytes each page loads (JS and CSS, each body gzipped here at level 9) in Chromium: this
// page against the Gradio Blocks page of the same agent (issue 19's goal: at most a fifth).
import { gzipSync } from "node:zlib";
import { createRequire } from "node:module";
const require = createRequire(new URL("../../../tests/js/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const BASE = process.argv[2] ?? "http://127.0.0.1:8765";
const browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
async function measure(url, ready) {
  const page = await (await browser.newContext({ locale: "ru-RU" })).newPage();
  const bodies = [];
  page.on("response", async (r) => {
    const t = r.request().resourceType();
    if (t === "script" || t === "stylesheet") bodies.push(r.body().then((b) => ({ url: r.url(), raw: b.length, gz: gzipSync(b, { level: 9 }).length })).catch(() => null));
  });
  const t0 = Date.now();
  await page.goto(url);
  await ready(page);
  const tti = Date.now() - t0;
  await page.waitForTimeout(3000); // lazy chunks (a heartbeat stream stays open: never "networkidle")
  const got = (await Promise.all(bodies)).filter(Boolean);
  await page.close();
  return { files: got.length, raw: got.reduce((s, b) => s + b.raw, 0), gzip: got.reduce((s, b) => s + b.gz, 0), ready_ms: tti };
}
const panel = await measure(`${BASE}/api/agent/ui/`, (p) => p.getByRole("region", { name: "Новый диалог" }).waitFor());
const gradio = await measure(`${process.argv[3] ?? BASE}/api/agent/gradio/`, (p) => p.locator("#agentchat-input textarea").waitFor());
await browser.close();
console.log(JSON.stringify({ panel, gradio, ratio: +(panel.gzip / gradio.gzip).toFixed(3) }));
