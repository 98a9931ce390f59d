// The built-in page's side of bench/page_stream.py: one Chromium page sends PROMPT REPEATS
// times early in one conversation, then again after HISTORY extra turns, and reports, per turn,
// the time from the click to the first answer text on screen and to the end of the run (the
// chatbot's status tracker hiding), with the number of distinct answer texts rendered.
// Prints one JSON object. Run by bench/page_stream.py, which starts the system.
import { createRequire } from "node:module";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const require = createRequire(new URL("../tests/js/package.json", import.meta.url));
const { chromium } = require("playwright-core");

const URL_ = process.env.GRADIO_URL;
const PROMPT = process.env.PROMPT;
const REPEATS = Number(process.env.REPEATS ?? 5);
const HISTORY = Number(process.env.HISTORY ?? 20);
const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync"];

// Watches the chatbot from inside the page, so timings are what a person would see.
function watch() {
  const root = document.querySelector("#agentchat-chatbot");
  const tracker = root.querySelector("[data-testid=status-tracker]");
  const marks = { t0: performance.now(), first: null, done: null, renders: 0, seen: false };
  const lastText = () => {
    const bots = root.querySelectorAll('.message:not(.thought) [data-testid="bot"]');
    return bots.length ? bots[bots.length - 1].innerText : "";
  };
  const before = lastText();
  let prev = before;
  // The clock starts at the click itself, not at playwright's round trips before it.
  document.querySelector("#agentchat-send").addEventListener(
    "click", () => { marks.t0 = performance.now(); }, { capture: true, once: true });
  window.__obs?.disconnect();
  window.__obs = new MutationObserver(() => {
    const now = performance.now();
    const text = lastText();
    if (text !== prev) {
      prev = text;
      marks.renders += 1;
      marks.first ??= now;
    }
    const hidden = tracker.classList.contains("hide");
    if (!hidden) marks.seen = true;
    if (hidden && marks.seen && marks.first !== null) marks.done ??= now;
  });
  window.__obs.observe(root, { subtree: true, childList: true, characterData: true,
                               attributes: true, attributeFilter: ["class"] });
  window.__marks = marks;
}

async function turn(page, text) {
  await page.evaluate(watch);
  await page.locator("#agentchat-input textarea").fill(text);
  await page.locator("#agentchat-send").click();
  await page.waitForFunction(() => window.__marks.done !== null, null, { timeout: 120_000 });
  const m = await page.evaluate(() => window.__marks);
  return { ttft_ms: m.first - m.t0, total_ms: m.done - m.t0, renders: m.renders };
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const summary = (turns) => ({
  ttft_ms: Math.round(median(turns.map((t) => t.ttft_ms))),
  total_ms: Math.round(median(turns.map((t) => t.total_ms))),
  renders: median(turns.map((t) => t.renders)),
  turns: turns.length,
});

const browser = await chromium.launchPersistentContext(
  mkdtempSync(join(tmpdir(), "agentchat-bench-chromium-")),
  { executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: ARGS, headless: true });
try {
  const page = await browser.newPage();
  await page.goto(URL_);
  await page.locator("#agentchat-chatbot").waitFor();
  await turn(page, PROMPT); // warm-up: the first render loads the chat's components
  const short = [];
  for (let i = 0; i < REPEATS; i++) short.push(await turn(page, PROMPT));
  for (let i = 0; i < HISTORY; i++) await turn(page, PROMPT);
  const long = [];
  for (let i = 0; i < REPEATS; i++) long.push(await turn(page, PROMPT));
  const messages = await page.locator("#agentchat-chatbot .message").count();
  console.log(JSON.stringify({ short: summary(short), long_history: summary(long),
                               long_history_messages: messages }));
} finally {
  await browser.close();
}
